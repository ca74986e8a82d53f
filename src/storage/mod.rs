//! The storage seam the core sees: a synchronous file trait. Appends go to the page cache inside
//! a handler and run to completion; an fsync takes time, so the core never issues one itself: it
//! names the files and directories to sync in its outputs, and the runtime's extension
//! (`runtime::storage::DurableFile` and `DurableStorage`: fsync, and `sendfile(2)` for fetches)
//! performs them and reports completion as an input.
//!
//! Two implementations: `runtime::storage::FileStorage` (real files, `fdatasync`, sendfile-able)
//! and [`memory::MemoryStorage`] here (an honest in-memory disk model: durable bytes, unsynced
//! sectors, process crash and power loss), which the simulator gives every node.
//!
//! Names are relative paths with `/` separators, e.g. `orders-0/00000000000000000000.log`.
//!
//! Durability follows POSIX, as the disk model enforces: a file's bytes are durable after an
//! fsync of it; its *name* (creation, removal, rename) is durable only after a sync of the
//! directory holding it, and a new directory's own entry after a sync of its parent (`""` is the
//! root).

pub mod memory;

use std::io;

/// A directory of named files.
pub trait Storage: Clone + Send + Sync + 'static {
    /// An open file.
    type File: StorageFile;
    /// Opens `name` for reading and writing, creating it empty (and its parent directory) if
    /// it does not exist.
    fn open(&self, name: &str) -> io::Result<Self::File>;
    /// Every file whose name starts with `prefix`, sorted.
    fn list(&self, prefix: &str) -> io::Result<Vec<String>>;
    /// Removes `name` (no error if it is already gone). Durable after a directory sync.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Renames `from` to `to`, replacing `to` if it exists (atomically, as `rename(2)`).
    /// Durable after a sync of the directory.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
}

/// The directory holding `name` (`""` for a name at the root).
pub fn parent_directory(name: &str) -> &str {
    name.rsplit_once('/').map_or("", |(directory, _)| directory)
}

/// An open file. Cloning shares the same file.
pub trait StorageFile: Clone + Send + Sync + std::fmt::Debug + 'static {
    /// Current length in bytes (including unsynced writes).
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Fills `buf` from `position`; `UnexpectedEof` if the file is too short.
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()>;
    /// Every byte of the file (a small one: a checkpoint, a snapshot).
    fn read_all(&self) -> io::Result<Vec<u8>> {
        let len = usize::try_from(self.len()?).map_err(io::Error::other)?;
        let mut bytes = vec![0; len];
        self.read_exact_at(&mut bytes, 0)?;
        Ok(bytes)
    }
    /// Writes `data` at `position` (into the page cache: not durable until an fsync).
    fn write_all_at(&self, data: &[u8], position: u64) -> io::Result<()>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
}
