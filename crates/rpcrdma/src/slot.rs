//! A call's reply slot: where a connection puts the outcome of a call the
//! async [`crate::Client`] made (instead of a `oneshot` channel per call),
//! and [`ReplyWait`], the future that waits on it and, while its call is
//! the connection's only one, serves the connection itself when the
//! connection is woken ([`WaitDrive`]: the wake-ups of the connection then
//! go to the waiting caller, not to the connection's task, so a reply costs
//! one task wake-up instead of two). Over RDMA the waiter makes the task
//! shell's rounds (`rdma::task`); over TCP it only waits (the reader task
//! delivers: [`ReplyWait::alone`]). A waiter counts itself among its
//! connection's waiters from before its call starts until it is done
//! ([`WaitDrive::enter_waiter`]), so that a connection with several calls
//! in flight is left to its own task without a look (no lock) per poll.
//!
//! The slot's one lock guards the outcome, whether the sender is gone, and
//! the waiter's waker. While the waiter serves the connection itself it is
//! marked `driving`: an outcome delivered meanwhile (by its own round, or
//! another thread's) does not wake it, since it looks at the slot next.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};

use crate::message::Message;
use crate::transport::TransportError;

/// A call's outcome: the reply or the connection's failure.
pub(crate) type Outcome = Result<Message, TransportError>;

#[derive(Default)]
struct SlotState {
    outcome: Option<Outcome>,
    /// The sender is gone (after its outcome, if it gave one).
    closed: bool,
    waker: Option<Waker>,
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct Slot {
    st: Mutex<SlotState>,
    /// The waiter serves the connection and looks at the slot afterwards.
    driving: AtomicBool,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The outcome, `Ready(None)` once the sender is gone without one;
    /// while neither, `register` (if given) is kept to be woken, and any
    /// waker kept before is forgotten otherwise.
    #[cfg(test)]
    pub(crate) fn poll_take(&self, register: Option<&Waker>) -> Poll<Option<Outcome>> {
        self.poll_take_kept(register).0
    }

    /// [`Slot::poll_take`], and whether `register` was the waker kept
    /// already (when it is `Pending`).
    fn poll_take_kept(&self, register: Option<&Waker>) -> (Poll<Option<Outcome>>, bool) {
        let mut st = self.lock();
        if let Some(r) = st.outcome.take() {
            return (Poll::Ready(Some(r)), true);
        }
        if st.closed {
            return (Poll::Ready(None), true);
        }
        let kept = match register {
            Some(w) if st.waker.as_ref().is_some_and(|o| o.will_wake(w)) => true,
            Some(w) => {
                st.waker = Some(w.clone());
                false
            }
            None => {
                st.waker = None;
                false
            }
        };
        (Poll::Pending, kept)
    }
}

/// The driver's half of a [`Slot`]: [`SlotSender::send`] the outcome, or
/// drop it without one (the call ended at its deadline or was forgotten).
/// One pointer: it travels with the call through the driver's tables.
pub(crate) struct SlotSender(Option<Arc<Slot>>);

impl SlotSender {
    /// Hands the outcome over and wakes the waiter, if it waits.
    pub(crate) fn send(mut self, r: Outcome) {
        if let Some(slot) = self.0.take() {
            close(&slot, Some(r));
        }
    }
}

/// The sender's last act: the outcome (if any) in, the slot closed, the
/// waiter woken.
fn close(slot: &Slot, r: Option<Outcome>) {
    let w = {
        let mut st = slot.lock();
        st.outcome = r;
        st.closed = true;
        st.waker.take()
    };
    // A waiter serving the connection looks at the slot when it is done
    // (after it clears the mark, under the lock taken above or later).
    if let Some(w) = w.filter(|_| !slot.driving.load(Ordering::SeqCst)) {
        w.wake();
    }
}

impl Drop for SlotSender {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            close(&slot, None);
        }
    }
}

/// Slots kept for reuse per thread, at most.
const FREE_MAX: usize = 8;

thread_local! {
    /// Slots whose waiter finished with them (each unshared, reset): a call
    /// takes one instead of an allocation.
    static FREE: std::cell::RefCell<Vec<Arc<Slot>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A new slot (one this thread kept, if any): the driver's sender and the
/// waiter's slot.
pub(crate) fn slot() -> (SlotSender, Arc<Slot>) {
    let slot = FREE
        .try_with(|f| f.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default();
    (SlotSender(Some(slot.clone())), slot)
}

/// [`slot`], keeping `waker` to be woken from the start (no lock: nobody
/// else holds the slot yet).
pub(crate) fn slot_for(waker: &Waker) -> (SlotSender, Arc<Slot>) {
    let mut slot = FREE
        .try_with(|f| f.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default();
    match Arc::get_mut(&mut slot) {
        Some(s) => s.state_mut().waker = Some(waker.clone()),
        None => slot.lock().waker = Some(waker.clone()),
    }
    (SlotSender(Some(slot.clone())), slot)
}

impl Slot {
    /// The state of a slot nobody else holds (no lock).
    fn state_mut(&mut self) -> &mut SlotState {
        self.st.get_mut().unwrap_or_else(|p| p.into_inner())
    }
}

/// Keeps `slot` for the next call of this thread if nobody else holds it
/// (its sender gone); reset to a new slot's state (no lock: it is this
/// waiter's alone).
fn recycle(slot: &mut Arc<Slot>) {
    let Some(s) = Arc::get_mut(slot) else {
        return;
    };
    *s.state_mut() = SlotState::default();
    *s.driving.get_mut() = false;
    let _ = FREE.try_with(|f| {
        let mut f = f.borrow_mut();
        if f.len() < FREE_MAX {
            f.push(slot.clone());
        }
    });
}

/// A connection a waiting caller may serve in its task's place.
pub(crate) trait WaitDrive: Send + Sync {
    /// A waiter comes (before its call starts): it counts among the
    /// connection's waiters until [`WaitDrive::release_waiter`].
    fn enter_waiter(&self);
    /// A waiter's poll (the waiter `token`, its task's `waker`): while its
    /// call is the connection's only one, the connection's wake-ups come
    /// to `waker`, and if one came, the waiter serves the connection now
    /// (which may deliver its outcome to its slot); otherwise any
    /// delegation is given back and the connection's own task serves it.
    fn wait_by_driving(&self, token: usize, waker: &Waker);
    /// The waiter `token` is done or dropped: it no longer counts, and the
    /// connection's own task serves its wake-ups again.
    fn release_waiter(&self, token: usize);
    /// The waiter `token` gives the connection's wake-ups back (it still
    /// counts): the connection's own task serves them until its next look.
    fn give_back(&self, token: usize);
}

/// No connection to serve ([`ReplyWait::alone`]).
struct NoDrive;

impl WaitDrive for NoDrive {
    fn enter_waiter(&self) {}
    fn wait_by_driving(&self, _token: usize, _waker: &Waker) {}
    fn release_waiter(&self, _token: usize) {}
    fn give_back(&self, _token: usize) {}
}

/// Waits for a call's outcome (`None`: the driver dropped the call without
/// one), driving the connection from the caller's task while the call is
/// the connection's only one (see the module docs). Dropping it gives the
/// connection's wake-ups back to the driver task.
pub(crate) struct ReplyWait {
    slot: Arc<Slot>,
    drive: Weak<dyn WaitDrive>,
    /// Counted among the connection's waiters ([`WaitDrive::enter_waiter`];
    /// released when done or dropped).
    entered: bool,
    /// The call's start gave this waiter the connection's wake-ups
    /// ([`ReplyWait::delegated_at_start`]): the first poll does not look
    /// at the connection.
    fresh: bool,
}

impl ReplyWait {
    /// A waiter of `drive` (counted from now on: make it before the call
    /// starts), or one that only waits if there is none.
    pub(crate) fn new<D: WaitDrive + 'static>(slot: Arc<Slot>, drive: Option<&Arc<D>>) -> Self {
        let Some(d) = drive else {
            return ReplyWait::alone(slot);
        };
        d.enter_waiter();
        let weak: Weak<D> = Arc::downgrade(d);
        let drive: Weak<dyn WaitDrive> = weak;
        ReplyWait {
            slot,
            drive,
            entered: true,
            fresh: false,
        }
    }

    /// A waiter that only waits (its connection's own task delivers).
    pub(crate) fn alone(slot: Arc<Slot>) -> Self {
        ReplyWait {
            slot,
            drive: Weak::<NoDrive>::new(),
            entered: false,
            fresh: false,
        }
    }

    /// This waiter's name with the connection's wake-up (unique while it
    /// lives: the slot's address).
    pub(crate) fn token(&self) -> usize {
        Arc::as_ptr(&self.slot) as usize
    }

    /// The call's start handed this waiter the connection's wake-ups, for
    /// the waker its slot keeps (with nothing fired since its start's last
    /// round, or the wake-up woken already): its first poll goes straight
    /// to the slot. (A poll with another waker looks at the connection.)
    pub(crate) fn delegated_at_start(&mut self) {
        self.fresh = true;
    }

    /// Looks at the connection ([`WaitDrive::wait_by_driving`]): a round
    /// this poll makes may deliver the outcome, with no wake-up of this
    /// task for it (the slot is looked at next).
    fn look(&self, d: &Arc<dyn WaitDrive>, waker: &Waker) {
        self.slot.driving.store(true, Ordering::SeqCst);
        d.wait_by_driving(self.token(), waker);
        self.slot.driving.store(false, Ordering::SeqCst);
    }

    /// Leaves the connection's waiters (and gives its wake-ups back to the
    /// driver task, if this waiter had them).
    fn release(&mut self, drive: Option<&Arc<dyn WaitDrive>>) {
        if std::mem::take(&mut self.entered) {
            if let Some(d) = drive {
                d.release_waiter(self.token());
            }
        }
    }
}

impl Future for ReplyWait {
    type Output = Option<Outcome>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Outcome>> {
        let this = &mut *self;
        let drive = this.drive.upgrade();
        let fresh = std::mem::take(&mut this.fresh);
        if let Some(d) = drive.as_ref().filter(|_| !fresh) {
            this.look(d, cx.waker());
        }
        let mut r = this.slot.poll_take_kept(Some(cx.waker()));
        if let Some(d) = drive.as_ref().filter(|_| fresh && !r.1 && r.0.is_pending()) {
            // Delegated at the start to another waker: this one looks.
            d.give_back(this.token());
            this.look(d, cx.waker());
            r = this.slot.poll_take_kept(Some(cx.waker()));
        }
        match r.0 {
            Poll::Ready(r) => {
                this.release(drive.as_ref());
                Poll::Ready(r)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for ReplyWait {
    fn drop(&mut self) {
        if self.entered {
            self.release(self.drive.upgrade().as_ref());
        }
        recycle(&mut self.slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::task::Wake;

    struct Count(AtomicU32);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The slot keeps the outcome until taken, tells a sender dropped
    /// without one, and wakes the waker kept (once), never one forgotten.
    #[test]
    fn a_slot_hands_over_its_outcome_once_and_wakes_its_waiter() {
        let count = Arc::new(Count(AtomicU32::new(0)));
        let w = Waker::from(count.clone());
        let woken = || count.0.load(Ordering::SeqCst);
        // Sent before anyone waits: no wake-up, the outcome stays.
        let (tx, s) = slot();
        tx.send(Ok(Message::inline(vec![1u8; 4])));
        assert_eq!(woken(), 0);
        assert_eq!(
            s.poll_take(None),
            Poll::Ready(Some(Ok(Message::inline(vec![1u8; 4]))))
        );
        assert_eq!(s.poll_take(None), Poll::Ready(None));
        // Waiting: the send wakes the waker once.
        let (tx, s) = slot();
        assert!(s.poll_take(Some(&w)).is_pending());
        assert!(s.poll_take(Some(&w)).is_pending());
        tx.send(Err(TransportError::Closed));
        assert_eq!(woken(), 1);
        assert_eq!(
            s.poll_take(Some(&w)),
            Poll::Ready(Some(Err(TransportError::Closed)))
        );
        // A waker forgotten (`None`) is not woken; a dropped sender reads as
        // no outcome.
        let (tx, s) = slot();
        assert!(s.poll_take(Some(&w)).is_pending());
        assert!(s.poll_take(None).is_pending());
        drop(tx);
        assert_eq!(woken(), 1);
        assert_eq!(s.poll_take(None), Poll::Ready(None));
        // A waiter that kept its waker learns of the drop.
        let (tx, s) = slot();
        assert!(s.poll_take(Some(&w)).is_pending());
        drop(tx);
        assert_eq!(woken(), 2);
        assert_eq!(s.poll_take(Some(&w)), Poll::Ready(None));
    }

    /// A slot is kept for the thread's next call only once nobody else
    /// holds it, and comes back as a new one: no outcome, open, no waker.
    #[test]
    fn a_finished_slot_is_reused_as_new() {
        let count = Arc::new(Count(AtomicU32::new(0)));
        let w = Waker::from(count.clone());
        FREE.with(|f| f.borrow_mut().clear());
        let (tx, s) = slot();
        let first = Arc::as_ptr(&s);
        assert!(s.poll_take(Some(&w)).is_pending());
        // The sender still holds it: not kept.
        let mut s = s;
        recycle(&mut s);
        assert_eq!(FREE.with(|f| f.borrow().len()), 0);
        tx.send(Ok(Message::inline(vec![2u8; 4])));
        recycle(&mut s);
        drop(s);
        assert_eq!(FREE.with(|f| f.borrow().len()), 1);
        let (tx, s) = slot();
        assert_eq!(Arc::as_ptr(&s), first);
        // As new: nothing to take, the old waker gone (not woken again).
        assert!(s.poll_take(None).is_pending());
        drop(tx);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(s.poll_take(None), Poll::Ready(None));
    }
}
