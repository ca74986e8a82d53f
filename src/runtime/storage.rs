//! The runtime's side of the storage seam ([`crate::storage`]): fsync and `sendfile(2)`, which
//! take time or need the operating system, as extensions of the core's synchronous traits; and
//! [`FileStorage`], real files.
//!
//! The driver awaits [`DurableFile::sync`] and [`DurableStorage::sync_directory`] off the state
//! machine and reports their completion as an input. [`MemoryStorage`]'s implementation sleeps
//! for the disk model's fsync latency (simulated time under madsim) between issuing the sync
//! (which fixes what it covers) and finishing it.

use std::future::Future;
use std::io;
#[cfg(not(madsim))]
use std::path::{Path, PathBuf};
#[cfg(not(madsim))]
use std::sync::Arc;

use crate::storage::memory::{MemoryFile, MemoryStorage};
pub use crate::storage::{parent_directory, Storage, StorageFile};

/// A [`Storage`] whose directories can be made durable.
pub trait DurableStorage: Storage<File: DurableFile> {
    /// Makes the entries of `directory` (`""`: the root) durable: files created, removed or
    /// renamed in it, and directories created in it. Takes time; never call it from a handler.
    fn sync_directory(
        &self,
        directory: &str,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static;
}

/// A [`StorageFile`] that can be made durable and sent with `sendfile(2)`.
pub trait DurableFile: StorageFile {
    /// Makes every write so far durable (`fdatasync`). Takes time; never call it from a handler.
    fn sync(&self) -> impl Future<Output = io::Result<()>> + Send + 'static;
    /// The operating-system file, for `sendfile(2)`; `None` in simulation.
    fn os_file(&self) -> Option<&std::fs::File> {
        None
    }
}

/// Sleeps for the disk model's next fsync latency, drawn when the sync is first polled (none:
/// the fsync finishes at once).
async fn sync_latency(storage: &MemoryStorage) {
    if let Some(latency) = storage.draw_sync_latency() {
        tokio::time::sleep(latency).await;
    }
}

impl DurableStorage for MemoryStorage {
    fn sync_directory(
        &self,
        directory: &str,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let pending = self.begin_directory_sync(directory);
        let storage = self.clone();
        async move {
            sync_latency(&storage).await;
            pending.finish()
        }
    }
}

impl DurableFile for MemoryFile {
    fn sync(&self) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let pending = self.begin_sync();
        let storage = self.storage().clone();
        async move {
            sync_latency(&storage).await;
            pending.finish()
        }
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
}

#[cfg(not(madsim))]
impl DurableStorage for FileStorage {
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
}

#[cfg(not(madsim))]
impl DurableFile for RealFile {
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
