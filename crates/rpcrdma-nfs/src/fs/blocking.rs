//! The async facade: export operations on tokio's blocking pool.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::error::{NfsError, NfsResult};
use super::export::Export;

/// Runs [`Export`] operations on tokio's blocking pool
/// (`spawn_blocking`), never on the reactor threads, at most
/// `max_blocking` at a time (the rest wait for a permit without holding a
/// thread).
#[derive(Clone)]
pub struct AsyncExport {
    export: Arc<Export>,
    permits: Arc<Semaphore>,
}

impl AsyncExport {
    /// The facade; `max_blocking` (at least 1) bounds the operations in
    /// flight on the blocking pool.
    pub fn new(export: Arc<Export>, max_blocking: usize) -> Self {
        AsyncExport {
            export,
            permits: Arc::new(Semaphore::new(max_blocking.max(1))),
        }
    }

    /// The export.
    pub fn export(&self) -> &Arc<Export> {
        &self.export
    }

    /// Runs `op` on the blocking pool, e.g.
    /// `facade.run(move |e| e.read(&fh, 0, 4096)).await`. The permit is
    /// held until `op` returns, even if the returned future is dropped.
    /// A panic in `op` is `ServerFault`.
    pub async fn run<T, F>(&self, op: F) -> NfsResult<T>
    where
        F: FnOnce(&Export) -> NfsResult<T> + Send + 'static,
        T: Send + 'static,
    {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| NfsError::ServerFault)?;
        let export = self.export.clone();
        let job = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            op(&export)
        });
        job.await.unwrap_or(Err(NfsError::ServerFault))
    }
}
