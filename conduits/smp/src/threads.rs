//! Thread mode: an N-rank job as N threads of this process.

use std::panic::{catch_unwind, AssertUnwindSafe};

use amnet_core::{Error, Result};

use crate::conduit::{SmpConduit, ThreadExit, ThreadShared};

/// How one rank of a thread-mode job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankOutcome<T> {
    /// The rank's function returned this value.
    Returned(T),
    /// The rank called `exit` (or saw another rank's exit) with this code.
    Exited(i32),
    /// The rank panicked with this message; the job was ended with code 101.
    Panicked(String),
}

impl<T> RankOutcome<T> {
    /// The value, if the rank returned.
    pub fn returned(self) -> Option<T> {
        match self {
            RankOutcome::Returned(v) => Some(v),
            _ => None,
        }
    }
}

/// Run `f` on `ranks` threads, each with its own smp conduit, and collect every rank's outcome
/// in rank order. A panicking rank ends the job (the others see exit code 101 at their next
/// poll).
pub fn run_threads<T, F>(ranks: u32, f: F) -> Result<Vec<RankOutcome<T>>>
where
    T: Send,
    F: Fn(SmpConduit) -> T + Sync,
{
    let shared = ThreadShared::new(ranks)?;
    let mut conduits = Vec::with_capacity(ranks as usize);
    for r in 0..ranks {
        conduits.push(SmpConduit::thread(r, shared.clone())?);
    }
    let f = &f;
    let shared_ref = &shared;
    let out = std::thread::scope(|s| {
        let hs: Vec<_> = conduits
            .into_iter()
            .enumerate()
            .map(|(r, c)| {
                std::thread::Builder::new()
                    .name(format!("amnet-rank-{r}"))
                    .spawn_scoped(s, move || match catch_unwind(AssertUnwindSafe(|| f(c))) {
                        Ok(v) => RankOutcome::Returned(v),
                        Err(p) => {
                            if let Some(e) = p.downcast_ref::<ThreadExit>() {
                                RankOutcome::Exited(e.0)
                            } else {
                                #[allow(clippy::cast_possible_truncation)] // r < ranks
                                shared_ref.request_exit(r as u32, 101);
                                let msg = p
                                    .downcast_ref::<&str>()
                                    .map(|s| s.to_string())
                                    .or_else(|| p.downcast_ref::<String>().cloned())
                                    .unwrap_or_else(|| "panic".into());
                                RankOutcome::Panicked(msg)
                            }
                        }
                    })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.map_err(|e| Error::os("smp", "starting a rank thread", e))?
                    .join()
                    .map_err(|_| Error::conduit("smp", "a rank thread could not be joined"))
            })
            .collect::<Result<Vec<_>>>()
    })?;
    Ok(out)
}
