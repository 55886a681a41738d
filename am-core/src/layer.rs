//! The narrow view through which a library layer above the core (the collectives) reaches it:
//! [`Endpoint::layer`] hands out a [`LayerHooks`] for one [`Layer`], and everything a layer
//! may do goes through it: install its handlers (only at the indices the core's table gives
//! the layer), send requests to them, install the guard that barriers consult, and keep its
//! per-endpoint state.
//!
//! The core registers a forwarding handler at every layer index when it attaches; a message to
//! an index whose handler is not installed yet is reported and dropped. A layer must therefore
//! install its handlers before any peer can send to them (for the collectives: inside the
//! collective `Coll::init`, before its agreement exchange). Clients cannot register these
//! indices in their [`HandlerTable`], so nothing a client does before the layer starts can
//! take them.

use std::any::Any;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::conduit::{Category, OutMsg, MAX_ARGS};
use crate::endpoint::not_in_handler;
use crate::handler::{HandlerFn, HandlerTable, Token};
use crate::handlers::Layer;
use crate::{Endpoint, Error, Rank, Result};

/// A barrier guard: returns why a barrier may not start now, or None.
pub type BarrierGuard = dyn Fn() -> Option<String> + Send + Sync;

/// A layer's progress function, run after a poll that delivered messages.
pub type Progress = dyn Fn() + Send + Sync;

/// One layer's hooks in one endpoint.
struct Slot {
    handlers: Vec<OnceLock<Box<HandlerFn>>>,
    barrier_guard: OnceLock<Box<BarrierGuard>>,
    progress: OnceLock<Box<Progress>>,
    state: OnceLock<Arc<dyn Any + Send + Sync>>,
}

/// Per-endpoint state of every layer's hooks.
pub(crate) struct LayerSlots {
    slots: Vec<Slot>,
    /// Some layer installed a progress function (read on every poll that delivered).
    has_progress: AtomicBool,
}

thread_local! {
    /// A progress function is running on this thread (they do not nest).
    static IN_PROGRESS: Cell<bool> = const { Cell::new(false) };
}

impl LayerSlots {
    pub(crate) fn new() -> Self {
        LayerSlots {
            slots: Layer::ALL
                .iter()
                .map(|l| Slot {
                    handlers: l.indices().map(|_| OnceLock::new()).collect(),
                    barrier_guard: OnceLock::new(),
                    progress: OnceLock::new(),
                    state: OnceLock::new(),
                })
                .collect(),
            has_progress: AtomicBool::new(false),
        }
    }

    /// Whether some layer has a progress function.
    #[inline]
    pub(crate) fn has_progress(&self) -> bool {
        self.has_progress.load(Ordering::Relaxed)
    }

    /// Run every layer's progress function, unless this thread runs a handler or a progress
    /// function already (a progress function may send, and a send may poll).
    #[cold]
    pub(crate) fn run_progress(&self) {
        if crate::endpoint::current_handler() != 0 || IN_PROGRESS.with(Cell::get) {
            return;
        }
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                IN_PROGRESS.with(|c| c.set(false));
            }
        }
        IN_PROGRESS.with(|c| c.set(true));
        let _reset = Reset;
        for s in &self.slots {
            if let Some(p) = s.progress.get() {
                p();
            }
        }
    }

    /// Why a barrier may not start now, as the first layer guard that objects says.
    pub(crate) fn barrier_objection(&self) -> Option<String> {
        self.slots
            .iter()
            .find_map(|s| s.barrier_guard.get().and_then(|g| g()))
    }
}

/// Register the forwarders for every layer index.
pub(crate) fn register_handlers(t: &mut HandlerTable) -> Result<()> {
    for layer in Layer::ALL {
        for index in layer.indices() {
            t.insert(index, Box::new(forward))?;
        }
    }
    Ok(())
}

fn forward(tok: &mut Token<'_>, args: &[u32], payload: &[u8]) {
    let index = tok.handler();
    let installed = Layer::owning(index).and_then(|l| {
        let i = usize::from(index - l.indices().start());
        tok.endpoint().inner.layer.slots[l.slot()].handlers[i].get()
    });
    match installed {
        Some(h) => h(tok, args, payload),
        None => crate::diag!(
            "amnet rank {}: dropped a message from rank {} for layer handler {}, which is not \
             installed on this rank",
            tok.endpoint().rank(),
            tok.src(),
            index
        ),
    }
}

/// What a library layer may do with an endpoint; see the [module docs](self).
#[derive(Clone, Copy)]
pub struct LayerHooks<'a> {
    ep: &'a Endpoint,
    layer: Layer,
}

impl std::fmt::Debug for LayerHooks<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LayerHooks")
            .field("layer", &self.layer)
            .field("rank", &self.ep.rank())
            .finish()
    }
}

impl Endpoint {
    /// The hooks of library layer `layer` on this endpoint.
    pub fn layer(&self, layer: Layer) -> LayerHooks<'_> {
        LayerHooks { ep: self, layer }
    }

    /// The handler running on the calling thread, if any.
    pub fn current_handler(&self) -> Option<u8> {
        match crate::endpoint::current_handler() {
            0 => None,
            h => Some(h),
        }
    }

    /// True between `barrier_notify` and the completion of the matching wait or try.
    pub fn barrier_pending(&self) -> bool {
        self.barrier_is_pending()
    }
}

impl LayerHooks<'_> {
    fn slot(&self) -> &Slot {
        &self.ep.inner.layer.slots[self.layer.slot()]
    }

    fn check_index(&self, index: u8) -> Result<usize> {
        let range = self.layer.indices();
        if range.contains(&index) {
            Ok(usize::from(index - range.start()))
        } else {
            Err(Error::Usage {
                op: "layer handler",
                detail: format!(
                    "index {index} is not one of the {} layer's ({}..={})",
                    self.layer.name(),
                    range.start(),
                    range.end()
                ),
            })
        }
    }

    /// Install the layer's handler at `index` (one of [`Layer::indices`]), once per index,
    /// after attach.
    pub fn install_handler<F>(&self, index: u8, f: F) -> Result<()>
    where
        F: Fn(&mut Token<'_>, &[u32], &[u8]) + Send + Sync + 'static,
    {
        let i = self.check_index(index)?;
        self.ep.attached_for("install_handler")?;
        self.slot().handlers[i]
            .set(Box::new(f))
            .map_err(|_| Error::DuplicateHandler { index })
    }

    /// Send a Medium request (Short when `payload` is empty) to the layer's handler `index` on
    /// `dest`. The same rules as [`Endpoint::request_medium`] apply (not from handler
    /// context; the payload at most [`Endpoint::max_medium`] bytes).
    pub fn request(&self, dest: Rank, index: u8, args: &[u32], payload: &[u8]) -> Result<()> {
        self.check_index(index)?;
        let att = self.ep.attached_for("layer request")?;
        not_in_handler("layer request")?;
        if args.len() > MAX_ARGS {
            return Err(Error::TooManyArgs {
                given: args.len(),
                max: MAX_ARGS,
            });
        }
        att.check_rank(dest)?;
        let category = if payload.is_empty() {
            Category::Short
        } else {
            att.check_payload(dest, Category::Medium, payload.len(), 0)?;
            Category::Medium
        };
        self.ep.lib_request(
            dest,
            &OutMsg {
                handler: index,
                category,
                is_reply: false,
                args,
                payload,
                long_offset: 0,
            },
        )
    }

    /// Install the guard that `barrier_notify` consults (once per layer): when it returns a
    /// reason, the barrier fails with [`Error::Usage`] carrying it. The collectives use it to
    /// refuse a barrier while collectives are in flight.
    pub fn set_barrier_guard(&self, guard: Box<BarrierGuard>) -> Result<()> {
        self.slot()
            .barrier_guard
            .set(guard)
            .map_err(|_| Error::Usage {
                op: "set_barrier_guard",
                detail: format!(
                    "the {} layer's barrier guard is installed",
                    self.layer.name()
                ),
            })
    }

    /// Install the layer's progress function (once per layer): the core runs it after every
    /// poll that delivered messages, on the polling thread, outside handler context and never
    /// nested in itself, so that a layer moves its operations along while the client waits in
    /// any amnet call that polls (`wait_until`, a barrier, a put). It must be cheap when it has
    /// nothing to do; it may send.
    pub fn set_progress(&self, f: Box<Progress>) -> Result<()> {
        self.slot().progress.set(f).map_err(|_| Error::Usage {
            op: "set_progress",
            detail: format!(
                "the {} layer's progress function is installed",
                self.layer.name()
            ),
        })?;
        self.ep
            .inner
            .layer
            .has_progress
            .store(true, Ordering::Release);
        Ok(())
    }

    /// The host scratch of `rank` mapped into this process, when `rank` shares memory with
    /// this one ([`Conduit::host_scratch`](crate::Conduit::host_scratch)): an area of
    /// [`LAYER_SCRATCH_BYTES`](crate::LAYER_SCRATCH_BYTES) bytes, page-aligned and zero-filled
    /// at start-up, that only the collectives layer writes (they are the only layer; more
    /// layers would divide it; the core's barrier flags lie past its end). `None` for a rank
    /// out of range or not on this host.
    ///
    /// Every access through it is the layer's own unsafe code: the memory is written by other
    /// processes at any time, so it is only to be read and written through atomics or under a
    /// flag protocol that orders the plain accesses.
    pub fn host_scratch(&self, rank: Rank) -> Option<std::ptr::NonNull<u8>> {
        if rank >= self.ep.size() {
            return None;
        }
        self.ep.inner.conduit.host_scratch(rank)
    }

    /// The base of `rank`'s segment mapped into this process, when put and get reach it by a
    /// copy ([`RmaPath::Direct`](crate::RmaPath::Direct); this rank's own segment included):
    /// `segment_len_of(rank)` bytes valid for the endpoint's life. `None` before attach, for
    /// a rank out of range, or where the path is another.
    ///
    /// As for [`host_scratch`](Self::host_scratch), every access through it is the layer's
    /// own unsafe code: the owner and every other rank write the segment at any time, so the
    /// layer reads a range only while its own protocol keeps the owner from writing it.
    pub fn peer_segment(&self, rank: Rank) -> Option<std::ptr::NonNull<u8>> {
        let att = self.ep.attached_for("peer_segment").ok()?;
        let p = att.peers.get(rank as usize)?.as_ref()?;
        std::ptr::NonNull::new(p.0)
    }

    /// The layer's per-endpoint state (set once; shared by every thread and clone of this
    /// endpoint).
    pub fn state(&self) -> &OnceLock<Arc<dyn Any + Send + Sync>> {
        &self.slot().state
    }
}
