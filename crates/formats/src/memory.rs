//! How much memory this process can still be given, so that a file too
//! large to hold is refused before anything is read or allocated
//! (`docs/FORMAT.md`, "Reading codes in place").

use std::path::Path;

use crate::FormatError;

/// The memory this process can still be given, in bytes, where the OS says
/// (Linux): `MemAvailable` plus `SwapFree` from `/proc/meminfo`, lowered to
/// what the process's cgroup still allows when it has a limit (v2
/// `memory.max`, or v1 `memory.limit_in_bytes`, less the cgroup's anonymous
/// memory in `memory.stat`: its page cache can be dropped). `None` where none of it
/// can be read (other systems; WebAssembly), and nothing is refused there.
pub fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |key: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with(key))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    };
    let system = field("MemAvailable:")?.saturating_add(field("SwapFree:").unwrap_or(0));
    Some(cgroup_room().map_or(system, |room| room.min(system)))
}

/// What the process's cgroup still allows, if it has a limit: the limit
/// less the cgroup's anonymous memory. Its page cache (reading the model
/// file puts it there) is charged to the cgroup too, but the kernel drops
/// it before it would refuse memory, so it is not counted as used.
fn cgroup_room() -> Option<u64> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    cgroup_room_in(&cgroups, Path::new("/sys/fs/cgroup"))
}

/// [`cgroup_room`] from `/proc/self/cgroup`'s text `cgroups`, the cgroup
/// file systems mounted at `sys` (v2 there, v1's memory controller at
/// `sys/memory`).
fn cgroup_room_in(cgroups: &str, sys: &Path) -> Option<u64> {
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).ok();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        // v2 (the unified line) or v1's memory controller: the limit's file
        // and `memory.stat`'s key for anonymous memory
        let (root, limit, anon) = match controllers {
            "" => (sys.to_path_buf(), "memory.max", "anon"),
            c if c.split(',').any(|c| c == "memory") => (sys.join("memory"), "memory.limit_in_bytes", "total_rss"),
            _ => continue,
        };
        // the cgroup's own directory, or the root when the namespace shows
        // only its own (a container)
        for dir in [root.join(path.trim_start_matches('/')), root] {
            // "max" (v2, no limit) does not parse: no bound from it
            let Some(limit) = read(dir.join(limit)).and_then(|l| l.trim().parse::<u64>().ok()) else {
                continue;
            };
            let used = read(dir.join("memory.stat"))
                .and_then(|stat| stat_value(&stat, anon))
                .unwrap_or(0);
            return Some(limit.saturating_sub(used));
        }
    }
    None
}

/// The value of `key` in a cgroup's `memory.stat` (`key value` lines).
fn stat_value(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        if k == key {
            v.trim().parse().ok()
        } else {
            None
        }
    })
}

/// Refuses a file of `size` bytes that is larger than `available`
/// ([`available_memory`]): [`FormatError::LargerThanMemory`], naming both.
pub(crate) fn check_fits(path: &Path, size: u64, available: Option<u64>) -> Result<(), FormatError> {
    match available {
        Some(available) if size > available => Err(FormatError::LargerThanMemory {
            path: path.to_path_buf(),
            size,
            available,
        }),
        _ => Ok(()),
    }
}

/// Refuses `path` if it is larger than the memory this process can still
/// be given ([`available_memory`]), before anything is read: a runtime
/// that holds a whole model (a converted file read in place, or every
/// layer copied out of it) would otherwise be stopped by the OS part way.
/// Errors: [`FormatError::LargerThanMemory`] naming the file's size and
/// the memory available; I/O errors reading its metadata.
pub fn check_fits_in_memory(path: impl AsRef<Path>) -> Result<(), FormatError> {
    let path = path.as_ref();
    let size = std::fs::metadata(path).map_err(|e| FormatError::io(path, e))?.len();
    check_fits(path, size, available_memory())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_larger_than_the_memory_available_is_refused_naming_both() {
        let path = Path::new("big.safetensors");
        check_fits(path, 10, Some(10)).unwrap();
        check_fits(path, u64::MAX, None).unwrap();
        let e = check_fits(path, 3 << 30, Some((3 << 30) - 1)).unwrap_err();
        assert!(
            matches!(e, FormatError::LargerThanMemory { size, available, .. } if size == 3 << 30 && available == (3 << 30) - 1),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "big.safetensors: the file is 3072.0 MiB (3221225472 bytes), more than the 3072.0 MiB (3221225471 bytes) \
             of memory this process can still be given (MemAvailable and SwapFree, within its cgroup's limit): \
             it is not loaded"
        );
    }

    #[test]
    fn a_cgroup_counts_its_anonymous_memory_not_its_page_cache() {
        let v2 = "anon 1048576\nfile 9999999999\nkernel 5\n";
        assert_eq!(stat_value(v2, "anon"), Some(1 << 20));
        assert_eq!(stat_value(v2, "file"), Some(9_999_999_999));
        let v1 = "cache 7\nrss 3\ntotal_cache 70\ntotal_rss 30\n";
        assert_eq!(stat_value(v1, "total_rss"), Some(30));
        assert_eq!(stat_value(v1, "anon"), None);
        assert_eq!(stat_value("anon x\n", "anon"), None);
    }

    /// A fake cgroup file system: `files` (path under it, contents).
    fn fake_sys(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn a_cgroup_limit_bounds_the_room_less_its_anonymous_memory_only() {
        // v2: limit 8 GiB, 1 GiB anonymous, 6 GiB of page cache (the model
        // file just read) and memory.current counting it: 7 GiB of room
        let v2 = fake_sys(&[
            ("app/memory.max", "8589934592\n"),
            ("app/memory.current", "7516192768\n"),
            ("app/memory.stat", "anon 1073741824\nfile 6442450944\n"),
        ]);
        assert_eq!(cgroup_room_in("0::/app\n", v2.path()), Some(7 << 30));
        // no limit ("max"), and a controller line of another kind: no bound
        let open = fake_sys(&[("app/memory.max", "max\n"), ("app/memory.stat", "anon 5\n")]);
        assert_eq!(cgroup_room_in("3:cpu:/app\n0::/app\n", open.path()), None);
        // v1, the namespace showing only the root: limit 4 GiB, total_rss 3 GiB
        let v1 = fake_sys(&[
            ("memory/memory.limit_in_bytes", "4294967296\n"),
            ("memory/memory.usage_in_bytes", "4294967296\n"),
            (
                "memory/memory.stat",
                "cache 1073741824\nrss 3\ntotal_cache 1073741824\ntotal_rss 3221225472\n",
            ),
        ]);
        assert_eq!(cgroup_room_in("4:memory:/gone/away\n0::/\n", v1.path()), Some(1 << 30));
        // anonymous memory over the limit leaves no room, not a wrap
        let full = fake_sys(&[("memory.max", "100\n"), ("memory.stat", "anon 150\n")]);
        assert_eq!(cgroup_room_in("0::/\n", full.path()), Some(0));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn linux_says_how_much_memory_there_is() {
        let available = available_memory().expect("/proc/meminfo has MemAvailable");
        assert!(available > 0);
    }
}
