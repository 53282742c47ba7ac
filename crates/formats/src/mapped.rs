//! Input files opened for reading: a read-only memory map of a regular
//! file (read into memory on WASI, which cannot map files), shared by the
//! safetensors and the GGUF readers; and a file read whole into the
//! process's own memory, for the in-place reader.

use std::path::Path;

use crate::FormatError;

/// A file's bytes: mapped (shared with the page cache), read into
/// anonymous memory, or owned.
pub(crate) enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
    /// A file read into anonymous memory: the map's first `.1` bytes.
    Read(memmap2::Mmap, usize),
}

impl Bytes {
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
            Bytes::Read(m, len) => &m[..*len],
        }
    }
}

/// Weights read their codes in place from a file's bytes through this.
impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// A file's bytes read into this process's own memory, open for writing:
/// anonymous memory (the map's first `.1` bytes), or a vector. The
/// in-place reader rewrites the packed Q4 tensors' codes here, then
/// freezes it.
pub(crate) enum PrivateBytes {
    Read(memmap2::MmapMut, usize),
    Owned(Vec<u8>),
}

impl PrivateBytes {
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            PrivateBytes::Read(m, len) => &mut m[..*len],
            PrivateBytes::Owned(v) => v,
        }
    }

    /// The bytes made read-only (the map's pages protected against writes).
    pub(crate) fn freeze(self, path: &Path) -> Result<Bytes, FormatError> {
        match self {
            PrivateBytes::Read(m, len) => Ok(Bytes::Read(
                m.make_read_only().map_err(|e| FormatError::io(path, e))?,
                len,
            )),
            PrivateBytes::Owned(v) => Ok(Bytes::Owned(v)),
        }
    }
}

/// Opens `path` (a regular file only: a directory, FIFO, socket or device
/// is refused with [`FormatError::NotARegularFile`], and a FIFO is opened
/// without blocking, so it cannot hang the caller) and maps it.
pub(crate) fn open(path: &Path) -> Result<Bytes, FormatError> {
    let io = |e| FormatError::io(path, e);
    let file = open_regular(path)?;
    if cfg!(target_family = "wasm") {
        return Ok(Bytes::Owned(read_all(&file, path)?));
    }
    // memmap2's `Mmap::map` is a read-only *shared* map (MAP_SHARED): it
    // sees the file as it is on disk, and qlinear never writes a file it
    // has mapped (outputs go to a new temporary file renamed over the
    // destination). If another process truncates the file meanwhile, a
    // read of the lost pages raises SIGBUS: the documented contract of
    // every memory-mapped loader, stated on this function and in FORMAT.md.
    // SAFETY: the map is read-only, the file is a regular file, and no
    // `&mut` to its bytes is ever made; what remains is the SIGBUS above.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    Ok(Bytes::Mapped(map))
}

/// Reads `path` whole into anonymous memory of its own, on transparent
/// huge pages where the OS has them (Linux): the process's private copy,
/// read once. No page of it is the file's, so nothing the file's owner
/// does later (truncating it, say) can reach it; a file that shrinks while
/// it is read is [`FormatError::ShrankWhileRead`], and one larger than the
/// memory the process can still be given is refused before anything is
/// allocated ([`FormatError::LargerThanMemory`]). Read into a vector on WASI.
pub(crate) fn read_private(path: &Path) -> Result<PrivateBytes, FormatError> {
    const HUGE_PAGE: usize = 2 << 20;
    let io = |e| FormatError::io(path, e);
    let file = open_regular(path)?;
    if cfg!(target_family = "wasm") {
        return Ok(PrivateBytes::Owned(read_all(&file, path)?));
    }
    let len = usize::try_from(file.metadata().map_err(io)?.len()).map_err(|_| FormatError::TooLarge {
        tensor: path.display().to_string(),
        what: "the file's length".into(),
    })?;
    crate::memory::check_fits(path, len as u64, crate::memory::available_memory())?;
    let mut map = memmap2::MmapOptions::new()
        .len(len.next_multiple_of(HUGE_PAGE).max(HUGE_PAGE))
        .map_anon()
        .map_err(io)?;
    // advised before the first write, so that the first touch of each 2 MiB
    // faults in a huge page rather than 512 small ones
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    #[cfg(any(unix, windows))]
    fill_in_parts(&file, &mut map[..len], path, read_parts(len))?;
    #[cfg(not(any(unix, windows)))]
    fill(&mut &file, &mut map[..len], path)?;
    Ok(PrivateBytes::Read(map, len))
}

/// How many threads read a file of `len` bytes: one per 64 MiB, at most
/// one per core and at most 4. The copy out of the page cache, and the
/// first touch of each fresh page it writes, run in the reading thread,
/// so parts read side by side finish sooner: the 1.7 GB q8 file of the
/// 1.7B-shaped model read in 0.15–0.18 s by two threads against 0.26–0.27
/// by one (AMD EPYC Zen 4, family 25 model 17, file in the page cache,
/// alternated; `docs/benchmarks/runs/zen4-parallel-read/harness`).
#[cfg(any(unix, windows))]
fn read_parts(len: usize) -> usize {
    const PART: usize = 64 << 20;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (len / PART).clamp(1, cores.min(4))
}

/// A source read at an offset without moving a cursor, so that several
/// threads can read one file at once.
#[cfg(any(test, unix, windows))]
trait ReadAt: Sync {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize>;
}

#[cfg(unix)]
impl ReadAt for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
}

#[cfg(windows)]
impl ReadAt for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        std::os::windows::fs::FileExt::seek_read(self, buf, offset)
    }
}

/// Fills `buf` with `source`'s bytes from offset 0, in `parts` pieces read
/// by as many threads (one piece: in this thread). The bytes are the same
/// whatever `parts` is; a source that ends before `buf` is full is
/// [`FormatError::ShrankWhileRead`], `found` the first offset not read.
#[cfg(any(test, unix, windows))]
fn fill_in_parts(source: &impl ReadAt, buf: &mut [u8], path: &Path, parts: usize) -> Result<(), FormatError> {
    let expected = buf.len() as u64;
    let piece = buf.len().div_ceil(parts.max(1)).max(1);
    // each piece's outcome: `Ok(())`, or the offset where its source ended,
    // or an I/O error
    let read_piece = |start: usize, part: &mut [u8]| -> Result<(), Result<u64, std::io::Error>> {
        let mut read = 0;
        while read < part.len() {
            match source.read_at(&mut part[read..], (start + read) as u64) {
                Ok(0) => return Err(Ok((start + read) as u64)),
                Ok(n) => read += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Err(e)),
            }
        }
        Ok(())
    };
    let outcomes: Vec<Result<(), Result<u64, std::io::Error>>> = if parts <= 1 {
        vec![read_piece(0, buf)]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = buf
                .chunks_mut(piece)
                .enumerate()
                .map(|(i, part)| s.spawn(move || read_piece(i * piece, part)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    };
    // an I/O error first (the first piece's), else the earliest end
    let mut ended: Option<u64> = None;
    for outcome in outcomes {
        match outcome {
            Ok(()) => {}
            Err(Err(e)) => return Err(FormatError::io(path, e)),
            Err(Ok(at)) => ended = Some(ended.map_or(at, |e| e.min(at))),
        }
    }
    match ended {
        Some(found) => Err(FormatError::ShrankWhileRead {
            path: path.to_path_buf(),
            expected,
            found,
        }),
        None => Ok(()),
    }
}

/// Fills `buf` from `reader`: [`FormatError::ShrankWhileRead`] if it ends
/// first. (Where a file cannot be read at an offset.)
#[cfg(any(test, not(any(unix, windows))))]
fn fill(reader: &mut impl std::io::Read, buf: &mut [u8], path: &Path) -> Result<(), FormatError> {
    let mut read = 0;
    while read < buf.len() {
        match reader.read(&mut buf[read..]) {
            Ok(0) => {
                return Err(FormatError::ShrankWhileRead {
                    path: path.to_path_buf(),
                    expected: buf.len() as u64,
                    found: read as u64,
                })
            }
            Ok(n) => read += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FormatError::io(path, e)),
        }
    }
    Ok(())
}

/// The whole file read into memory (WASI cannot map files).
fn read_all(file: &std::fs::File, path: &Path) -> Result<Vec<u8>, FormatError> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut &*file, &mut bytes).map_err(|e| FormatError::io(path, e))?;
    Ok(bytes)
}

/// Opens a regular file for reading (see [`open`]).
fn open_regular(path: &Path) -> Result<std::fs::File, FormatError> {
    let io = |e| FormatError::io(path, e);
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => not_regular(path, &m),
        _ => io(e),
    })?;
    let stat = file.metadata().map_err(io)?;
    if !stat.is_file() {
        return Err(not_regular(path, &stat));
    }
    Ok(file)
}

fn not_regular(path: &Path, m: &std::fs::Metadata) -> FormatError {
    FormatError::NotARegularFile {
        path: path.to_path_buf(),
        kind: file_kind(m),
    }
}

/// What a path that is not a regular file is, for a message: `"a
/// directory"`, `"a symbolic link"`, `"a FIFO"`, `"a socket"`, `"a
/// device"`, or `"not a regular file"` (`"a regular file"` for one).
pub fn file_kind(m: &std::fs::Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if t.is_fifo() {
                "a FIFO"
            } else if t.is_socket() {
                "a socket"
            } else if t.is_char_device() || t.is_block_device() {
                "a device"
            } else {
                "not a regular file"
            }
        }
        #[cfg(not(unix))]
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out its bytes a few at a time, is interrupted
    /// once, and fails or ends where told.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        interrupted: bool,
        fail_at_end: bool,
    }

    impl std::io::Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if !self.interrupted {
                self.interrupted = true;
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            if self.at == self.bytes.len() && self.fail_at_end {
                return Err(std::io::Error::other("disk gone"));
            }
            let n = buf.len().min(3).min(self.bytes.len() - self.at);
            buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn trickle(len: usize, fail_at_end: bool) -> Trickle {
        Trickle {
            bytes: (0..len as u8).collect(),
            at: 0,
            interrupted: false,
            fail_at_end,
        }
    }

    #[test]
    fn a_file_is_read_whole_through_short_reads_and_interruptions() {
        let mut buf = [0u8; 10];
        fill(&mut trickle(10, false), &mut buf, Path::new("f")).unwrap();
        assert_eq!(buf, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    }

    #[test]
    fn a_file_that_ends_early_is_a_typed_error_naming_it() {
        let mut buf = [0u8; 10];
        let e = fill(&mut trickle(7, false), &mut buf, Path::new("m.safetensors")).unwrap_err();
        assert!(
            matches!(
                e,
                FormatError::ShrankWhileRead {
                    expected: 10,
                    found: 7,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "m.safetensors: the file shrank while it was read: it ended after 7 of its 10 bytes"
        );
        let e = fill(&mut trickle(7, true), &mut buf, Path::new("m.safetensors")).unwrap_err();
        assert!(matches!(e, FormatError::Io { .. }), "{e:?}");
    }

    /// A positional source that hands out at most 3 bytes a call, is
    /// interrupted on every fifth call, holds `len` bytes, and fails from
    /// `fail_at` on if told.
    struct Positional {
        len: usize,
        fail_at: Option<u64>,
        calls: std::sync::atomic::AtomicUsize,
    }

    impl ReadAt for Positional {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            if self
                .calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                .is_multiple_of(5)
            {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            if self.fail_at.is_some_and(|at| offset >= at) {
                return Err(std::io::Error::other("disk gone"));
            }
            let at = (offset as usize).min(self.len);
            let n = buf.len().min(3).min(self.len - at);
            for (i, b) in buf[..n].iter_mut().enumerate() {
                *b = (at + i) as u8;
            }
            Ok(n)
        }
    }

    fn positional(len: usize, fail_at: Option<u64>) -> Positional {
        Positional {
            len,
            fail_at,
            calls: 0.into(),
        }
    }

    #[test]
    fn a_file_read_in_parts_gives_the_same_bytes_whatever_the_parts() {
        for parts in [1, 2, 3, 4, 7, 40, 41] {
            let mut buf = [0u8; 40];
            fill_in_parts(&positional(40, None), &mut buf, Path::new("f"), parts).unwrap();
            assert!(
                buf.iter().enumerate().all(|(i, &b)| b == i as u8),
                "{parts} parts: {buf:?}"
            );
        }
        fill_in_parts(&positional(0, None), &mut [], Path::new("f"), 2).unwrap();
    }

    #[test]
    fn a_file_that_ends_early_in_any_part_is_the_earliest_end() {
        for (parts, len) in [(1, 25), (2, 25), (3, 25), (4, 9), (4, 39)] {
            let mut buf = [0u8; 40];
            let e = fill_in_parts(&positional(len, None), &mut buf, Path::new("m.safetensors"), parts).unwrap_err();
            assert!(
                matches!(e, FormatError::ShrankWhileRead { expected: 40, found, .. } if found == len as u64),
                "{parts} parts, {len} bytes: {e:?}"
            );
        }
        let mut buf = [0u8; 40];
        let e = fill_in_parts(&positional(40, Some(30)), &mut buf, Path::new("m"), 4).unwrap_err();
        assert!(matches!(e, FormatError::Io { .. }), "{e:?}");
    }

    #[cfg(unix)]
    #[test]
    fn a_private_read_of_a_file_holds_its_bytes_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        let bytes: Vec<u8> = (0..(3 << 20) + 5).map(|i: usize| (i * 7 + i / 4096) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let mut read = read_private(&path).unwrap();
        assert_eq!(read.as_mut_slice(), &bytes[..]);
    }
}
