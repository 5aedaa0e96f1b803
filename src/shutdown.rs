//! One shutdown signal for every task of the gateway, after mini-redis's
//! `shutdown.rs`: each task holds a [`Shutdown`] and stops at the stage
//! that concerns it. The workers stop leasing when the drain begins;
//! the upkeep, the config watcher, the scheduled backups, the admin
//! listener (which answers `/readyz` "draining" meanwhile) and its outcome
//! history stop once the drain is over.

use tokio::sync::watch;

/// Where the gateway's shutdown is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Running,
    Draining,
    Stopped,
}

/// Moves every task's [`Shutdown`] on; dropping it stops them all.
pub struct Signal(watch::Sender<Stage>);

/// A task's view of the gateway's shutdown.
#[derive(Clone)]
pub struct Shutdown(watch::Receiver<Stage>);

impl Signal {
    pub fn new() -> (Signal, Shutdown) {
        let (sender, receiver) = watch::channel(Stage::Running);
        (Signal(sender), Shutdown(receiver))
    }

    /// The drain begins: no new work is taken.
    pub fn drain(&self) {
        self.0.send_if_modified(|stage| {
            let begins = *stage < Stage::Draining;
            if begins {
                *stage = Stage::Draining;
            }
            begins
        });
    }

    /// The drain is over: every task ends.
    pub fn stop(&self) {
        self.0.send_replace(Stage::Stopped);
    }
}

impl Shutdown {
    /// Until the drain begins (or the signal is gone).
    pub async fn draining(mut self) {
        let _ = self.0.wait_for(|stage| *stage >= Stage::Draining).await;
    }

    /// Until the drain is over (or the signal is gone).
    pub async fn stopped(mut self) {
        let _ = self.0.wait_for(|stage| *stage >= Stage::Stopped).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_stage_ends_the_tasks_waiting_for_it() {
        let (signal, shutdown) = Signal::new();
        let draining = tokio::spawn(shutdown.clone().draining());
        let stopped = tokio::spawn(shutdown.clone().stopped());
        signal.drain();
        draining.await.unwrap();
        assert!(!stopped.is_finished(), "the drain is not the end");
        signal.stop();
        stopped.await.unwrap();
        // A task that starts waiting late is not left behind, nor one whose
        // signal is gone.
        shutdown.clone().draining().await;
        drop(signal);
        shutdown.stopped().await;
    }
}
