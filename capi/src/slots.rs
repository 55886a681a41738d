//! Tables of outstanding operations behind C handles: a handle is an id, not a pointer.
//!
//! An id packs a kind bit (bit 63: explicit put/get/atomic handles, or fetching atomic
//! handles), a 31-bit generation and a slot index plus one. An id that names no live slot of
//! its table (synced to completion already, never made, made for the other kind) is refused
//! with a message naming it; 0 is never an id.

use std::sync::{Mutex, MutexGuard};

use crate::status::{CError, ERR_BAD_HANDLE};

/// The kind bit of the ids of fetching atomic handles.
pub(crate) const FETCH_KIND: u64 = 1 << 63;

struct Slot<T> {
    generation: u32,
    /// Reserved by an id (between its making and its retirement).
    live: bool,
    /// The operation; taken out while a sync works on it.
    op: Option<T>,
}

/// The outstanding operations of one kind.
pub(crate) struct Slots<T> {
    kind: u64,
    what: &'static str,
    slots: Vec<Slot<T>>,
    free: Vec<usize>,
}

impl<T> Slots<T> {
    /// An empty table for ids of `kind` (0 or [`FETCH_KIND`]), naming its handles `what`.
    pub(crate) const fn new(kind: u64, what: &'static str) -> Self {
        Slots {
            kind,
            what,
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    fn split(&self, id: u64) -> Option<(usize, u32)> {
        if id & FETCH_KIND != self.kind {
            return None;
        }
        let index = (id & 0xffff_ffff) as u32;
        let generation = ((id >> 32) & 0x7fff_ffff) as u32;
        Some(((index as usize).wrapping_sub(1), generation))
    }

    /// A new id for `op`.
    pub(crate) fn make(&mut self, op: T) -> Result<u64, CError> {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                let n = self.slots.len();
                if n >= u32::MAX as usize - 1 {
                    return Err(CError::new(
                        ERR_BAD_HANDLE,
                        format!("{n} {} are outstanding; sync some first", self.what),
                    ));
                }
                self.slots.push(Slot {
                    generation: 1,
                    live: false,
                    op: None,
                });
                n
            }
        };
        let slot = &mut self.slots[index];
        slot.live = true;
        slot.op = Some(op);
        Ok(self.kind | (u64::from(slot.generation) << 32) | (index as u64 + 1))
    }

    /// Take the operation of `id` out (its slot stays reserved until [`Slots::finish`]).
    pub(crate) fn take(&mut self, id: u64) -> Result<T, CError> {
        let what = self.what;
        let slot = self.split(id).and_then(|(i, g)| {
            self.slots
                .get_mut(i)
                .filter(|s| s.live && s.generation == g)
        });
        match slot {
            Some(s) => s.op.take().ok_or_else(|| {
                CError::new(
                    ERR_BAD_HANDLE,
                    format!("handle {id:#x} is being synced by another thread"),
                )
            }),
            None => Err(CError::new(
                ERR_BAD_HANDLE,
                format!(
                    "handle {id:#x} names none of the outstanding {what} (already synced to \
                     completion, made for another call, or never made by amnet)"
                ),
            )),
        }
    }

    /// Put back the operation of an id [`Slots::take`] accepted, or with `op` None retire
    /// the id.
    pub(crate) fn finish(&mut self, id: u64, op: Option<T>) {
        let Some((index, _)) = self.split(id) else {
            return;
        };
        let s = &mut self.slots[index];
        match op {
            Some(op) => s.op = Some(op),
            None => {
                s.live = false;
                s.op = None;
                s.generation = s.generation.wrapping_add(1) & 0x7fff_ffff;
                if s.generation == 0 {
                    s.generation = 1;
                }
                self.free.push(index);
            }
        }
    }
}

/// Lock a table, whatever a panic left in it (its invariants hold between calls).
pub(crate) fn lock<T>(m: &'static Mutex<Slots<T>>) -> MutexGuard<'static, Slots<T>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
