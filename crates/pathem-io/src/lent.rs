//! Buffers a port lends to the engine instead of having their bytes copied.
//!
//! The engine copies every frame into its delay line once (TLEM's line: memory follows the
//! bytes in flight). A DPDK port receives each frame into an mbuf of its own pool; copying
//! that mbuf into the line and the line into a fresh mbuf to transmit costs two copies and an
//! allocation a frame that DPDK's own forwarders do not pay. So a receiving port that can
//! lend its buffers hands each frame over with a [`Lend`]: the engine may take the buffer
//! (a [`Lent`]) and keep it in the line in place of the bytes, and a transmitting port that
//! takes lent buffers sends that very buffer ([`crate::port::TxPort::send_lent`]). Dropping a
//! `Lent` gives the buffer back to its owner, so a frame the path drops, or one still in the
//! line when it is dropped, returns its buffer exactly once.

use std::cell::Cell;
use std::ptr::NonNull;

/// A kind of lent buffer: how one is given back. Compared by address, so each kind is one
/// `static`.
pub struct LentKind {
    /// The kind's name (for `Debug`).
    pub name: &'static str,
    /// Gives a buffer back to its owner.
    ///
    /// # Safety
    /// `raw` is a buffer of this kind that the caller owns; it is not used after the call.
    pub give_back: unsafe fn(raw: NonNull<u8>),
}

/// One lent buffer, owned: it holds a frame's bytes until it is sent or dropped.
pub struct Lent {
    raw: NonNull<u8>,
    data: NonNull<u8>,
    len: usize,
    kind: &'static LentKind,
}

// SAFETY: a Lent owns its buffer outright (its bytes are reached only through it), and every
// kind's `give_back` may be called from any thread (`Lent::new`'s contract).
unsafe impl Send for Lent {}
// SAFETY: `&Lent` only reads the bytes, which nothing changes while the Lent lives.
unsafe impl Sync for Lent {}

impl Lent {
    /// Takes ownership of a buffer.
    ///
    /// # Safety
    /// The caller owns `raw`, a buffer of `kind`, and gives it up: nothing else uses or gives
    /// it back. `data[..len]` are its frame's bytes, valid and unchanged until
    /// `kind.give_back(raw)`, which may be called from any thread.
    pub unsafe fn new(raw: NonNull<u8>, data: NonNull<u8>, len: usize, kind: &'static LentKind) -> Lent {
        Lent { raw, data, len, kind }
    }

    /// The frame's bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: `new`'s contract: valid and unchanged while the Lent owns the buffer.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }

    /// True when the buffer is of `kind`.
    #[inline]
    pub fn is(&self, kind: &'static LentKind) -> bool {
        std::ptr::eq(self.kind, kind)
    }

    /// The buffer, handed over for good: the caller now gives it back (a transmitting port
    /// passes it to its device, which frees it once sent).
    #[inline]
    pub fn into_raw(self) -> NonNull<u8> {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        // SAFETY: the Lent owns `raw`, of its kind (`new`'s contract), and is dropped once.
        unsafe { (self.kind.give_back)(self.raw) }
    }
}

impl std::fmt::Debug for Lent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lent({}, {} bytes)", self.kind.name, self.len)
    }
}

/// A received frame's offer of its buffer, for the length of the receive callback: the
/// engine takes it ([`crate::port::RxFrame::take_lent`]) or leaves it, and the port gives back
/// what was left ([`into_inner`](Lend::into_inner)).
pub struct Lend {
    lent: Cell<Option<Lent>>,
    /// The offered buffer's bytes, valid while the Lent lives.
    data: NonNull<u8>,
    len: usize,
}

impl Lend {
    /// An offer of `lent`.
    pub fn new(lent: Lent) -> Lend {
        let (data, len) = (lent.data, lent.len);
        Lend { lent: Cell::new(Some(lent)), data, len }
    }

    /// The offered buffer's bytes, for as long as the offer is borrowed: only a frame that
    /// borrows it takes the buffer out, and taking consumes that frame.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the bytes of the Lent this offer was made with, which lives (in the cell,
        // or taken by `RxFrame::take_lent`, which consumes the only frame borrowing them)
        // at least as long as this borrow of the offer.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }

    /// The buffer, if it is still offered.
    #[inline]
    pub(crate) fn take(&self) -> Option<Lent> {
        self.lent.take()
    }

    /// What nobody took.
    pub fn into_inner(self) -> Option<Lent> {
        self.lent.into_inner()
    }
}

impl std::fmt::Debug for Lend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lend")
    }
}

/// Buffers of plain heap memory, for tests: each counted in its own counter until it is given
/// back, so a test sees exactly its own.
#[doc(hidden)]
pub mod testing {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;

    /// The kind of [`lend`]'s buffers.
    pub static HEAP: LentKind = LentKind { name: "heap", give_back };

    struct Buffer {
        bytes: Vec<u8>,
        out: Arc<AtomicI64>,
    }

    unsafe fn give_back(raw: NonNull<u8>) {
        // SAFETY: `lend` made `raw` from a `Box<Buffer>`, given back once (`LentKind`).
        let b = unsafe { Box::from_raw(raw.as_ptr() as *mut Buffer) };
        b.out.fetch_sub(1, Ordering::SeqCst);
    }

    /// A buffer holding a copy of `bytes`, counted in `out` until it is given back.
    pub fn lend(bytes: &[u8], out: &Arc<AtomicI64>) -> Lent {
        let b = Box::new(Buffer { bytes: bytes.to_vec(), out: out.clone() });
        out.fetch_add(1, Ordering::SeqCst);
        let data = NonNull::new(b.bytes.as_ptr() as *mut u8).unwrap_or(NonNull::dangling());
        let len = b.bytes.len();
        let raw = NonNull::from(Box::leak(b)).cast::<u8>();
        // SAFETY: `raw` is the leaked box, owned by the Lent from here; its bytes stay on the
        // heap, unchanged, until `give_back` frees the box, which any thread may do.
        unsafe { Lent::new(raw, data, len, &HEAP) }
    }

    /// Gives back a buffer [`lend`] made that a port took with [`Lent::into_raw`].
    ///
    /// # Safety
    /// `raw` came from `into_raw` of a [`HEAP`] Lent and is given back once.
    pub unsafe fn give_back_raw(raw: NonNull<u8>) {
        // SAFETY: the caller's contract.
        unsafe { give_back(raw) }
    }
}
