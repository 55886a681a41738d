//! Hooks for library layers built on the AM core (the collectives): a reserved range of
//! handler indices that a layer installs after attach, requests to those handlers, a guard
//! that barriers consult, and queries a layer needs to enforce its own rules.
//!
//! The core registers a forwarding handler at every index of [`LAYER_HANDLERS`] when it
//! attaches; a message to an index whose handler is not installed yet is reported and
//! dropped. A layer must therefore install its handlers before any peer can send to them
//! (for the collectives: inside the collective `coll_init`, before its agreement exchange).

use std::any::Any;
use std::ops::RangeInclusive;
use std::sync::{Arc, OnceLock};

use crate::conduit::{Category, OutMsg, MAX_ARGS};
use crate::endpoint::{current_handler, not_in_handler};
use crate::handler::{HandlerFn, HandlerTable, Token};
use crate::{Endpoint, Error, Rank, Result};

/// Handler indices reserved for library layers (inside the library's 1..=127).
pub const LAYER_HANDLERS: RangeInclusive<u8> = 32..=63;

const N_LAYER: usize = 32;

/// A barrier guard: returns why a barrier may not start now, or None.
pub type BarrierGuard = dyn Fn() -> Option<String> + Send + Sync;

/// Per-endpoint state of the layer hooks.
pub(crate) struct LayerSlots {
    handlers: Vec<OnceLock<Box<HandlerFn>>>,
    pub(crate) barrier_guard: OnceLock<Box<BarrierGuard>>,
    state: OnceLock<Arc<dyn Any + Send + Sync>>,
}

impl LayerSlots {
    pub(crate) fn new() -> Self {
        LayerSlots {
            handlers: (0..N_LAYER).map(|_| OnceLock::new()).collect(),
            barrier_guard: OnceLock::new(),
            state: OnceLock::new(),
        }
    }
}

/// Register the forwarders for every layer index.
pub(crate) fn register_handlers(t: &mut HandlerTable) -> Result<()> {
    for index in LAYER_HANDLERS {
        t.insert(index, Box::new(forward))?;
    }
    Ok(())
}

fn forward(tok: &mut Token<'_>, args: &[u32], payload: &[u8]) {
    let i = usize::from(tok.handler() - LAYER_HANDLERS.start());
    match tok.endpoint().inner.layer.handlers[i].get() {
        Some(h) => h(tok, args, payload),
        None => eprintln!(
            "amnet rank {}: dropped a message from rank {} for layer handler {}, which is not \
             installed on this rank",
            tok.endpoint().rank(),
            tok.src(),
            tok.handler()
        ),
    }
}

fn check_index(index: u8) -> Result<()> {
    if LAYER_HANDLERS.contains(&index) {
        Ok(())
    } else {
        Err(Error::Usage {
            op: "layer handler",
            detail: format!(
                "index {index} is outside the layer range {}..={}",
                LAYER_HANDLERS.start(),
                LAYER_HANDLERS.end()
            ),
        })
    }
}

impl Endpoint {
    /// Install the handler of a library layer at `index` (in [`LAYER_HANDLERS`]), once per
    /// index. Clients register their own handlers in the [`HandlerTable`] instead.
    pub fn install_layer_handler<F>(&self, index: u8, f: F) -> Result<()>
    where
        F: Fn(&mut Token<'_>, &[u32], &[u8]) + Send + Sync + 'static,
    {
        check_index(index)?;
        self.attached_for("install_layer_handler")?;
        let i = usize::from(index - LAYER_HANDLERS.start());
        self.inner.layer.handlers[i]
            .set(Box::new(f))
            .map_err(|_| Error::DuplicateHandler { index })
    }

    /// Send a Medium request (Short when `payload` is empty) to the layer handler `index` on
    /// `dest`. The same rules as [`Endpoint::request_medium`] apply (not from handler
    /// context; the payload at most [`Endpoint::max_medium`] bytes).
    pub fn layer_request(&self, dest: Rank, index: u8, args: &[u32], payload: &[u8]) -> Result<()> {
        check_index(index)?;
        let att = self.attached_for("layer_request")?;
        not_in_handler("layer_request")?;
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
        self.lib_request(
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

    /// Install the guard that `barrier_notify` consults (once per endpoint): when it returns a
    /// reason, the barrier fails with [`Error::Usage`] carrying it. The collectives use it to
    /// refuse a barrier while collectives are in flight.
    pub fn set_barrier_guard(&self, guard: Box<BarrierGuard>) -> Result<()> {
        self.inner
            .layer
            .barrier_guard
            .set(guard)
            .map_err(|_| Error::Usage {
                op: "set_barrier_guard",
                detail: "a barrier guard is already installed".into(),
            })
    }

    /// The per-endpoint state slot of the library layer (set once; shared by every thread and
    /// clone of this endpoint).
    pub fn layer_state(&self) -> &OnceLock<Arc<dyn Any + Send + Sync>> {
        &self.inner.layer.state
    }

    /// The handler running on the calling thread, if any.
    pub fn current_handler(&self) -> Option<u8> {
        match current_handler() {
            0 => None,
            h => Some(h),
        }
    }

    /// True between `barrier_notify` and the completion of the matching wait or try.
    pub fn barrier_pending(&self) -> bool {
        self.barrier_is_pending()
    }
}
