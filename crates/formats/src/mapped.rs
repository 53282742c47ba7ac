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

/// Opens `path` (a regular file only: a directory, FIFO, socket or device
/// is refused with [`FormatError::NotARegularFile`], and a FIFO is opened
/// without blocking, so it cannot hang the caller) and maps it.
pub(crate) fn open(path: &Path) -> Result<Bytes, FormatError> {
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
    if cfg!(target_family = "wasm") {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut &file, &mut bytes).map_err(io)?;
        return Ok(Bytes::Owned(bytes));
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
