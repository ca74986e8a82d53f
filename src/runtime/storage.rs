//! The storage seam: a synchronous file trait (appends go to the page cache inside a handler and
//! run to completion) plus an asynchronous `sync` (fsync takes time; the driver awaits it off the
//! state machine and reports completion as an input).
//!
//! Two implementations: [`FileStorage`] here (real files, `fdatasync`, sendfile-able), and
//! `SimStorage` in the `seedlog-sim` crate (a madsim plugin with durable bytes, an unsynced tail,
//! process crash and power loss).
//!
//! Names are relative paths with `/` separators, e.g. `orders-0/00000000000000000000.log`.
//!
//! Durability follows POSIX, as the simulator's disk model enforces: a file's bytes are durable
//! after [`StorageFile::sync`]; its *name* (creation, removal, rename) is durable only after
//! [`Storage::sync_directory`] of the directory holding it, and a new directory's own entry after
//! a sync of its parent (`""` is the root).

use std::future::Future;
use std::io;
#[cfg(not(madsim))]
use std::path::{Path, PathBuf};
#[cfg(not(madsim))]
use std::sync::Arc;

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
    /// Makes the entries of `directory` (`""`: the root) durable: files created, removed or
    /// renamed in it, and directories created in it. Takes time; never call it from a handler.
    fn sync_directory(
        &self,
        directory: &str,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static;
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
    /// Writes `data` at `position` (into the page cache: not durable until [`sync`](Self::sync)).
    fn write_all_at(&self, data: &[u8], position: u64) -> io::Result<()>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes every write so far durable (`fdatasync`). Takes time; never call it from a handler.
    fn sync(&self) -> impl Future<Output = io::Result<()>> + Send + 'static;
    /// The operating-system file, for `sendfile(2)`; `None` in simulation.
    fn os_file(&self) -> Option<&std::fs::File> {
        None
    }
}

/// Real files under a root directory. Production only: under madsim, `std::fs` would reach the
/// real disk, outside the simulation, so this type does not exist there.
#[cfg(not(madsim))]
#[derive(Debug, Clone)]
pub struct FileStorage {
    root: PathBuf,
}

#[cfg(not(madsim))]
impl FileStorage {
    /// Storage rooted at `root` (created if missing).
    pub fn new(root: impl Into<PathBuf>) -> io::Result<FileStorage> {
        let root = root.into();
        std::fs::create_dir_all(&root)?;
        Ok(FileStorage { root })
    }

    fn path(&self, name: &str) -> io::Result<PathBuf> {
        let relative = Path::new(name);
        let safe = relative
            .components()
            .all(|part| matches!(part, std::path::Component::Normal(_)));
        if !safe || name.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad storage name '{name}'"),
            ));
        }
        Ok(self.root.join(relative))
    }
}

#[cfg(not(madsim))]
impl Storage for FileStorage {
    type File = RealFile;

    fn open(&self, name: &str) -> io::Result<RealFile> {
        let path = self.path(name)?;
        let parent = path.parent().expect("a storage path has a parent");
        if !parent.exists() {
            std::fs::create_dir_all(parent)?;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        Ok(RealFile {
            file: Arc::new(file),
            name: name.to_owned(),
        })
    }

    fn list(&self, prefix: &str) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        let mut pending = vec![(self.root.clone(), String::new())];
        while let Some((directory, relative)) = pending.pop() {
            for entry in std::fs::read_dir(&directory)? {
                let entry = entry?;
                let file_name = entry.file_name().to_string_lossy().into_owned();
                let name = if relative.is_empty() {
                    file_name
                } else {
                    format!("{relative}/{file_name}")
                };
                if entry.file_type()?.is_dir() {
                    pending.push((entry.path(), name));
                } else if name.starts_with(prefix) {
                    names.push(name);
                }
            }
        }
        names.sort();
        Ok(names)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        match std::fs::remove_file(self.path(name)?) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        std::fs::rename(self.path(from)?, self.path(to)?)
    }

    fn sync_directory(
        &self,
        directory: &str,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let path = if directory.is_empty() {
            Ok(self.root.clone())
        } else {
            self.path(directory)
        };
        async move {
            let path = path?;
            let shown = path.display().to_string();
            tokio::task::spawn_blocking(move || std::fs::File::open(&path)?.sync_all())
                .await
                .map_err(|error| {
                    io::Error::other(format!(
                        "fsync of directory {shown} did not complete: {error}"
                    ))
                })?
        }
    }
}

/// A real file shared between the log and in-flight fetches.
#[cfg(not(madsim))]
#[derive(Debug, Clone)]
pub struct RealFile {
    file: Arc<std::fs::File>,
    name: String,
}

#[cfg(not(madsim))]
impl StorageFile for RealFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&*self.file, buf, position)
    }

    fn write_all_at(&self, data: &[u8], position: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&*self.file, data, position)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync(&self) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let file = Arc::clone(&self.file);
        let name = self.name.clone();
        async move {
            tokio::task::spawn_blocking(move || file.sync_data())
                .await
                .map_err(|error| {
                    io::Error::other(format!("fsync of {name} did not complete: {error}"))
                })?
        }
    }

    fn os_file(&self) -> Option<&std::fs::File> {
        Some(&self.file)
    }
}
