//! Handler tables and tokens.

use crate::conduit::{Category, OutMsg, MAX_ARGS};
use crate::endpoint::Endpoint;
use crate::{Error, Rank, Result};

/// A handler: called with the message's token, its arguments and its payload (empty for Short;
/// a library buffer for Medium; the bytes in the local segment for Long).
pub type HandlerFn = dyn Fn(&mut Token<'_>, &[u32], &[u8]) + Send + Sync;

/// The first handler index clients may use ([`handlers::FIRST_CLIENT`](crate::handlers)).
pub const FIRST_CLIENT_HANDLER: u8 = crate::handlers::FIRST_CLIENT;

/// The handlers a rank registers at attach. Indices 1..=127 belong to the library,
/// 128..=255 to clients. Every rank must register the same set of indices.
pub struct HandlerTable {
    pub(crate) entries: Vec<Option<Box<HandlerFn>>>,
}

impl Default for HandlerTable {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for HandlerTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idx: Vec<usize> = (0..256).filter(|&i| self.entries[i].is_some()).collect();
        f.debug_struct("HandlerTable")
            .field("registered", &idx)
            .finish()
    }
}

impl HandlerTable {
    /// An empty table.
    pub fn new() -> Self {
        HandlerTable {
            entries: (0..256).map(|_| None).collect(),
        }
    }

    /// Register `f` at `index` (128..=255).
    pub fn register<F>(&mut self, index: u8, f: F) -> Result<&mut Self>
    where
        F: Fn(&mut Token<'_>, &[u32], &[u8]) + Send + Sync + 'static,
    {
        if index == 0 {
            return Err(Error::HandlerZero);
        }
        if index < FIRST_CLIENT_HANDLER {
            return Err(Error::ReservedHandler { index });
        }
        self.insert(index, Box::new(f))?;
        Ok(self)
    }

    pub(crate) fn insert(&mut self, index: u8, f: Box<HandlerFn>) -> Result<()> {
        let slot = &mut self.entries[usize::from(index)];
        if slot.is_some() {
            return Err(Error::DuplicateHandler { index });
        }
        *slot = Some(f);
        Ok(())
    }

    /// A 256-bit mask of the registered indices, for the attach-time agreement check.
    pub(crate) fn mask(&self) -> [u8; 32] {
        let mut m = [0u8; 32];
        for (i, e) in self.entries.iter().enumerate() {
            if e.is_some() {
                m[i / 8] |= 1 << (i % 8);
            }
        }
        m
    }
}

/// What a running handler knows about its message, and the only way it may send: one reply,
/// from a request handler.
pub struct Token<'a> {
    pub(crate) ep: &'a Endpoint,
    pub(crate) att: &'a crate::endpoint::Attached,
    pub(crate) src: Rank,
    pub(crate) handler: u8,
    pub(crate) category: Category,
    pub(crate) is_request: bool,
    pub(crate) replied: bool,
}

impl std::fmt::Debug for Token<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("src", &self.src)
            .field("handler", &self.handler)
            .field("category", &self.category)
            .field("is_request", &self.is_request)
            .field("replied", &self.replied)
            .finish()
    }
}

impl<'a> Token<'a> {
    /// The rank that sent the message.
    pub fn src(&self) -> Rank {
        self.src
    }
    /// The index of the running handler.
    pub fn handler(&self) -> u8 {
        self.handler
    }
    /// The message's category: a Short, Medium or Long message (what a layer that registers
    /// one handler per index for every category, as GASNet-1's handler signatures need,
    /// dispatches on).
    pub fn category(&self) -> Category {
        self.category
    }
    /// True in a request handler, false in a reply handler.
    pub fn is_request(&self) -> bool {
        self.is_request
    }
    /// The endpoint the message arrived on (for segment access and statistics).
    pub fn endpoint(&self) -> &'a Endpoint {
        self.ep
    }

    /// Reply with a Short message.
    pub fn reply_short(&mut self, handler: u8, args: &[u32]) -> Result<()> {
        self.reply(handler, Category::Short, args, &[], 0, false)
    }
    /// Reply with a Medium message.
    pub fn reply_medium(&mut self, handler: u8, args: &[u32], payload: &[u8]) -> Result<()> {
        self.reply(handler, Category::Medium, args, payload, 0, false)
    }
    /// Reply with a Long message whose payload lands at `dest_offset` in the requester's segment.
    pub fn reply_long(
        &mut self,
        handler: u8,
        args: &[u32],
        payload: &[u8],
        dest_offset: u64,
    ) -> Result<()> {
        self.reply(handler, Category::Long, args, payload, dest_offset, false)
    }

    /// `ReplyFromReply` in a reply handler, `SecondReply` once the handler replied.
    pub(crate) fn check_may_reply(&self) -> Result<()> {
        if !self.is_request {
            return Err(Error::ReplyFromReply {
                handler: self.handler,
            });
        }
        if self.replied {
            return Err(Error::SecondReply {
                handler: self.handler,
            });
        }
        Ok(())
    }

    pub(crate) fn reply(
        &mut self,
        handler: u8,
        category: Category,
        args: &[u32],
        payload: &[u8],
        long_offset: u64,
        internal: bool,
    ) -> Result<()> {
        self.check_may_reply()?;
        let att = self.att;
        if !internal {
            att.check_client_handler(handler)?;
        }
        if args.len() > MAX_ARGS {
            return Err(Error::TooManyArgs {
                given: args.len(),
                max: MAX_ARGS,
            });
        }
        att.check_payload(self.src, category, payload.len(), long_offset)?;
        let msg = OutMsg {
            handler,
            category,
            is_reply: true,
            args,
            payload,
            long_offset,
        };
        self.ep.send_msg(self.src, &msg, true)?;
        self.replied = true;
        Ok(())
    }
}
