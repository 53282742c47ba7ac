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
    let read = |path: String| std::fs::read_to_string(path).ok();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        // v2 (the unified line) or v1's memory controller: the limit's file
        // and `memory.stat`'s key for anonymous memory
        let (root, limit, anon) = match controllers {
            "" => ("/sys/fs/cgroup", "memory.max", "anon"),
            c if c.split(',').any(|c| c == "memory") => ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "total_rss"),
            _ => continue,
        };
        // the cgroup's own directory, or the root when the namespace shows
        // only its own (a container)
        for dir in [format!("{root}{path}"), root.to_string()] {
            // "max" (v2, no limit) does not parse: no bound from it
            let Some(limit) = read(format!("{dir}/{limit}")).and_then(|l| l.trim().parse::<u64>().ok()) else {
                continue;
            };
            let used = read(format!("{dir}/memory.stat"))
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

    #[cfg(target_os = "linux")]
    #[test]
    fn linux_says_how_much_memory_there_is() {
        let available = available_memory().expect("/proc/meminfo has MemAvailable");
        assert!(available > 0);
    }
}
