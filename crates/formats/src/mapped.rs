//! Input files opened for reading: a read-only memory map of a regular
//! file (read into memory on WASI, which cannot map files), shared by the
//! safetensors and the GGUF readers.

use std::path::Path;

use crate::FormatError;

/// A file's bytes: mapped, or owned.
pub(crate) enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Bytes {
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// Weights read their codes in place from a file's bytes through this.
impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// A file's bytes open for writing in this process only: a private
/// copy-on-write map (a page written becomes the process's own copy; the
/// file never changes), or owned bytes. The in-place reader rewrites the
/// packed Q4 tensors' nibbles here, then freezes it.
pub(crate) enum PrivateBytes {
    Mapped(memmap2::MmapMut),
    Owned(Vec<u8>),
}

impl PrivateBytes {
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            PrivateBytes::Mapped(m) => m,
            PrivateBytes::Owned(v) => v,
        }
    }

    /// The bytes made read-only (the map's pages protected against writes).
    pub(crate) fn freeze(self, path: &Path) -> Result<Bytes, FormatError> {
        match self {
            PrivateBytes::Mapped(m) => Ok(Bytes::Mapped(m.make_read_only().map_err(|e| FormatError::io(path, e))?)),
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

/// Opens `path` as [`open`] does, mapped *privately* and writable
/// (MAP_PRIVATE): writes make the process's own copy of a page and never
/// reach the file; unwritten pages are still the file's, read from the page
/// cache (read into memory on WASI).
pub(crate) fn open_private(path: &Path) -> Result<PrivateBytes, FormatError> {
    let io = |e| FormatError::io(path, e);
    let file = open_regular(path)?;
    if cfg!(target_family = "wasm") {
        return Ok(PrivateBytes::Owned(read_all(&file, path)?));
    }
    // A private map's `&mut` writes only this process's copies of the
    // pages, never the file; a page not yet copied is still the file's, so
    // the SIGBUS contract of `open` holds for it.
    // SAFETY: a private map of a regular file, the only reference to it until `freeze`; SIGBUS as above.
    let map = unsafe { memmap2::MmapOptions::new().map_copy(&file) }.map_err(io)?;
    Ok(PrivateBytes::Mapped(map))
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
