//! Agreement between the ranks of one communicator that live in this process.
//!
//! NCCL requires every rank to call the same collectives, in the same order, with the same
//! count, type, operation and root, and every send to meet a receive of the same count and type.
//! Each rank only knows its own calls, and usually that is enough for memory safety: a rank's
//! kernels touch its own buffers with its own count, and peers exchange data through NCCL's
//! internal buffers. Not between ranks of one process: there NCCL's P2P transport gives a
//! peer's kernel the address of this rank's buffer ("P2P/direct pointer"), and the peer reads or
//! writes it with the *peer's* count. A mismatch would then write past the end of a buffer.
//!
//! So every communicator made in this process from one unique id shares a [`Ledger`]: the first
//! rank to make its `n`-th collective (or its `n`-th send to a peer, or receive from it) writes
//! down its signature, and every other local rank's `n`-th call must match it, or it is refused
//! ([`Error::CollectiveMismatch`]) before it is enqueued. A refused call enqueues nothing, so no
//! peer ever receives a mismatching address. Ranks of other processes never get this process's
//! buffer addresses (NCCL passes them only within a process, and `um` registers no buffer), so
//! they need no check. With one local rank the ledger costs one atomic load per call.
//!
//! Membership is complete before the first call: every local rank joins before it calls
//! `ncclCommInitRankConfig`, and no rank's initialisation completes before every rank called it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use um_core::{Error, Result};

use crate::sys::UNIQUE_ID_BYTES;

/// What one call looks like to its peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sig {
    pub(crate) kind: &'static str,
    pub(crate) dtype: &'static str,
    pub(crate) count: usize,
    pub(crate) op: Option<i32>,
    pub(crate) root: Option<usize>,
}

impl std::fmt::Display for Sig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {} {}", self.kind, self.count, self.dtype)?;
        if let Some(op) = self.op {
            write!(f, ", op {op}")?;
        }
        if let Some(root) = self.root {
            write!(f, ", root {root}")?;
        }
        Ok(())
    }
}

/// Where a call is matched: the collective sequence, or the point-to-point one of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Channel {
    Collective,
    /// A send from `src` to `dst` (`send`: on `src`) or its receive (on `dst`).
    Send {
        src: usize,
        dst: usize,
    },
    Recv {
        src: usize,
        dst: usize,
    },
}

/// One call of the sequence: its signature, who wrote it, who has matched it.
#[derive(Debug, Clone)]
struct Entry {
    sig: Sig,
    first: usize,
    seen: Vec<usize>,
}

/// A sequence of entries: those from `base` on that not every party has reached.
#[derive(Debug, Default)]
struct Sequence {
    base: u64,
    entries: VecDeque<Entry>,
}

#[derive(Debug, Default)]
struct State {
    world_size: usize,
    members: Vec<usize>,
    /// Per rank, its next collective's number.
    next: HashMap<usize, u64>,
    collectives: Sequence,
    /// Per pair `(src, dst)`: the sends' and receives' next numbers and the sequence.
    pairs: HashMap<(usize, usize), (u64, u64, Sequence)>,
}

/// The ledger of one communicator's ranks in this process (see the module's documentation).
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// Local ranks: with one, there is nothing to agree on and the lock is never taken.
    members: AtomicUsize,
    state: Mutex<State>,
}

/// What a call did to the ledger, to take it back if a later call of the same group fails.
enum Undo {
    Pushed(Channel, usize),
    Seen(Channel, usize, usize),
    Nothing,
}

type Registry = HashMap<[u8; UNIQUE_ID_BYTES], Weak<Ledger>>;

/// The ledgers of this process, by unique id.
fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Ledger {
    /// Joins (or starts) the ledger of the communicator of `id` as `rank` of `world_size`.
    pub(crate) fn join(
        id: &[u8; UNIQUE_ID_BYTES],
        rank: usize,
        world_size: usize,
    ) -> Result<Arc<Ledger>> {
        let mut reg = registry();
        reg.retain(|_, w| w.strong_count() > 0);
        let ledger = match reg.get(id).and_then(Weak::upgrade) {
            Some(l) => l,
            None => {
                let l = Arc::new(Ledger::default());
                reg.insert(*id, Arc::downgrade(&l));
                l
            }
        };
        drop(reg);
        {
            let mut st = ledger.lock();
            if st.members.is_empty() {
                st.world_size = world_size;
            } else if st.world_size != world_size {
                return Err(Error::Bootstrap {
                    reason: format!(
                        "two communicators of one unique id in this process disagree on the world \
                         size ({} and {world_size})",
                        st.world_size
                    ),
                });
            }
            if st.members.contains(&rank) {
                return Err(Error::Bootstrap {
                    reason: format!(
                        "rank {rank} of this unique id already has a communicator in this process"
                    ),
                });
            }
            st.members.push(rank);
            ledger.members.store(st.members.len(), Ordering::Release);
        }
        Ok(ledger)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `rank` is gone (its communicator was destroyed or aborted, or never made). It stops being
    /// a party: its own numbers and the pairs it is in are forgotten, and it no longer counts as
    /// having reached any entry, so an entry is complete once every remaining local rank has
    /// reached it. The other ranks' pending calls are kept, and theirs still have to match
    /// them: a `leave` wiped every pending entry once, so that a receive of 20 could meet a
    /// pending send of 10 between two other local ranks (red team 15; with direct pointers
    /// between local ranks, an access past a buffer). An entry only the departed rank wrote
    /// stays too: the remaining ranks are checked against it (conservative: the departed rank's
    /// kernel may have used it).
    pub(crate) fn leave(&self, rank: usize) {
        let mut st = self.lock();
        st.members.retain(|r| *r != rank);
        st.next.remove(&rank);
        st.pairs.retain(|&(src, dst), _| src != rank && dst != rank);
        for entry in &mut st.collectives.entries {
            entry.seen.retain(|r| *r != rank);
        }
        st.compact();
        self.members.store(st.members.len(), Ordering::Release);
    }

    /// Whether there is anything to agree on (two or more local ranks).
    pub(crate) fn shared(&self) -> bool {
        self.members.load(Ordering::Acquire) > 1
    }

    /// Records the calls of one group (or one call) of this ledger's ranks, all or none:
    /// `(rank, channel, sig)` each.
    #[cfg(test)]
    fn record(&self, calls: &[(usize, Channel, Sig)]) -> Result<()> {
        let calls: Vec<_> = calls.iter().map(|&(r, c, s)| (self, r, c, s)).collect();
        record_all(&calls)
    }
}

/// Records the calls of one group, whose communicators may belong to several ledgers: all or
/// none. Each shared ledger is locked once, in address order (so two threads never wait for each
/// other's locks), and a call that does not match takes back every call recorded before it.
pub(crate) fn record_all(calls: &[(&Ledger, usize, Channel, Sig)]) -> Result<()> {
    let mut ledgers: Vec<&Ledger> = calls.iter().map(|c| c.0).filter(|l| l.shared()).collect();
    if ledgers.is_empty() {
        return Ok(());
    }
    ledgers.sort_by_key(|l| std::ptr::from_ref::<Ledger>(l) as usize);
    ledgers.dedup_by(|a, b| std::ptr::eq(*a, *b));
    let mut guards: Vec<MutexGuard<'_, State>> = ledgers.iter().map(|l| l.lock()).collect();
    let mut undo = Vec::with_capacity(calls.len());
    for &(ledger, rank, channel, sig) in calls {
        let Some(i) = ledgers.iter().position(|l| std::ptr::eq(*l, ledger)) else {
            continue;
        };
        match guards[i].apply(rank, channel, sig) {
            Ok(u) => undo.push((i, u)),
            Err(e) => {
                for (i, u) in undo.into_iter().rev() {
                    guards[i].revert(u);
                }
                return Err(e);
            }
        }
    }
    for g in &mut guards {
        g.compact();
    }
    Ok(())
}

impl State {
    fn is_member(&self, rank: usize) -> bool {
        self.members.contains(&rank)
    }

    /// The sequence of `channel` and the number of `rank`'s next call on it, advanced.
    fn advance(&mut self, rank: usize, channel: Channel) -> (&mut Sequence, u64) {
        match channel {
            Channel::Collective => {
                let n = self.next.entry(rank).or_insert(self.collectives.base);
                let seq = *n;
                *n += 1;
                (&mut self.collectives, seq)
            }
            Channel::Send { src, dst } | Channel::Recv { src, dst } => {
                let (sends, recvs, seq) = self.pairs.entry((src, dst)).or_default();
                let n = if matches!(channel, Channel::Send { .. }) {
                    sends
                } else {
                    recvs
                };
                let at = *n;
                *n += 1;
                (seq, at)
            }
        }
    }

    fn parties(&self, channel: Channel) -> usize {
        match channel {
            Channel::Collective => self.members.len(),
            Channel::Send { .. } | Channel::Recv { .. } => 2,
        }
    }

    fn apply(&mut self, rank: usize, channel: Channel, sig: Sig) -> Result<Undo> {
        if let Channel::Send { src, dst } | Channel::Recv { src, dst } = channel {
            // A peer in another process never sees this rank's addresses.
            if !(self.is_member(src) && self.is_member(dst)) {
                return Ok(Undo::Nothing);
            }
        }
        let (seq, n) = self.advance(rank, channel);
        let at = usize::try_from(n.saturating_sub(seq.base)).unwrap_or(usize::MAX);
        match seq.entries.get_mut(at) {
            Some(entry) => {
                if entry.sig != sig {
                    let (first, theirs) = (entry.first, entry.sig);
                    let what = match channel {
                        Channel::Collective => format!("collective #{n}"),
                        Channel::Send { src, dst } | Channel::Recv { src, dst } => {
                            format!("point-to-point call #{n} from {src} to {dst}")
                        }
                    };
                    self.retreat(rank, channel);
                    return Err(Error::CollectiveMismatch {
                        rank,
                        other: first,
                        what,
                        detail: format!("{sig} here, {theirs} there"),
                    });
                }
                entry.seen.push(rank);
                Ok(Undo::Seen(channel, rank, at))
            }
            None => {
                seq.entries.push_back(Entry {
                    sig,
                    first: rank,
                    seen: vec![rank],
                });
                Ok(Undo::Pushed(channel, rank))
            }
        }
    }

    fn retreat(&mut self, rank: usize, channel: Channel) {
        match channel {
            Channel::Collective => {
                if let Some(n) = self.next.get_mut(&rank) {
                    *n -= 1;
                }
            }
            Channel::Send { src, dst } => {
                if let Some(p) = self.pairs.get_mut(&(src, dst)) {
                    p.0 -= 1;
                }
            }
            Channel::Recv { src, dst } => {
                if let Some(p) = self.pairs.get_mut(&(src, dst)) {
                    p.1 -= 1;
                }
            }
        }
    }

    fn sequence(&mut self, channel: Channel) -> Option<&mut Sequence> {
        match channel {
            Channel::Collective => Some(&mut self.collectives),
            Channel::Send { src, dst } | Channel::Recv { src, dst } => {
                self.pairs.get_mut(&(src, dst)).map(|p| &mut p.2)
            }
        }
    }

    fn revert(&mut self, undo: Undo) {
        match undo {
            Undo::Nothing => {}
            Undo::Pushed(channel, rank) => {
                self.retreat(rank, channel);
                if let Some(seq) = self.sequence(channel) {
                    seq.entries.pop_back();
                }
            }
            Undo::Seen(channel, rank, at) => {
                self.retreat(rank, channel);
                if let Some(entry) = self.sequence(channel).and_then(|s| s.entries.get_mut(at)) {
                    entry.seen.retain(|r| *r != rank);
                }
            }
        }
    }

    /// Drops the entries every party has reached.
    fn compact(&mut self) {
        let members = self.parties(Channel::Collective);
        pop_complete(&mut self.collectives, members);
        for (_, _, seq) in self.pairs.values_mut() {
            pop_complete(seq, 2);
        }
    }
}

fn pop_complete(seq: &mut Sequence, parties: usize) {
    while seq.entries.front().is_some_and(|e| e.seen.len() >= parties) {
        seq.entries.pop_front();
        seq.base += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(kind: &'static str, count: usize) -> Sig {
        Sig {
            kind,
            dtype: "ncclFloat32",
            count,
            op: Some(0),
            root: None,
        }
    }

    fn id(n: u8) -> [u8; UNIQUE_ID_BYTES] {
        let mut id = [0u8; UNIQUE_ID_BYTES];
        id[0] = n;
        id[1] = 0xa5;
        id
    }

    #[test]
    fn one_local_rank_checks_nothing() {
        let l = Ledger::join(&id(1), 0, 8).expect("join");
        assert!(!l.shared());
        l.record(&[(0, Channel::Collective, sig("all_reduce", 4))])
            .expect("ok");
        l.record(&[(0, Channel::Collective, sig("all_gather", 9))])
            .expect("ok");
    }

    #[test]
    fn local_ranks_must_make_the_same_collectives_in_the_same_order() {
        let key = id(2);
        let (a, b) = (
            Ledger::join(&key, 0, 2).expect("0"),
            Ledger::join(&key, 1, 2).expect("1"),
        );
        assert!(Arc::ptr_eq(&a, &b), "one id, one ledger");
        // Rank 0 runs two ahead; rank 1 matches the first, then differs in count.
        a.record(&[(0, Channel::Collective, sig("all_reduce", 100))])
            .expect("0 #0");
        a.record(&[(0, Channel::Collective, sig("all_reduce", 100))])
            .expect("0 #1");
        b.record(&[(1, Channel::Collective, sig("all_reduce", 100))])
            .expect("1 #0");
        let err = b
            .record(&[(1, Channel::Collective, sig("all_reduce", 200))])
            .expect_err("1 #1 differs");
        let text = err.to_string();
        assert!(text.contains("collective #1"), "{text}");
        assert!(text.contains("200") && text.contains("100"), "{text}");
        // The refused call left nothing behind: the right one still matches.
        b.record(&[(1, Channel::Collective, sig("all_reduce", 100))])
            .expect("1 #1 again");
        // Both complete: the entries are gone.
        assert!(a.lock().collectives.entries.is_empty());
        // Another kind at the same position is refused too.
        b.record(&[(1, Channel::Collective, sig("broadcast", 4))])
            .expect("1 #2");
        assert!(
            a.record(&[(0, Channel::Collective, sig("all_reduce", 4))])
                .is_err()
        );
    }

    #[test]
    fn a_group_is_recorded_all_or_nothing() {
        let key = id(3);
        let (a, _b) = (
            Ledger::join(&key, 0, 2).expect("0"),
            Ledger::join(&key, 1, 2).expect("1"),
        );
        let err = a
            .record(&[
                (0, Channel::Collective, sig("all_reduce", 8)),
                (1, Channel::Collective, sig("all_reduce", 9)),
            ])
            .expect_err("the group disagrees with itself");
        assert!(
            matches!(
                err,
                Error::CollectiveMismatch {
                    rank: 1,
                    other: 0,
                    ..
                }
            ),
            "{err}"
        );
        assert!(a.lock().collectives.entries.is_empty(), "nothing recorded");
        a.record(&[
            (0, Channel::Collective, sig("all_reduce", 8)),
            (1, Channel::Collective, sig("all_reduce", 8)),
        ])
        .expect("an agreeing group");
    }

    #[test]
    fn sends_meet_receives_of_the_same_size_per_pair_in_order() {
        let key = id(4);
        let (a, _b) = (
            Ledger::join(&key, 0, 3).expect("0"),
            Ledger::join(&key, 1, 3).expect("1"),
        );
        let p2p = |count| sig("send/recv", count);
        a.record(&[(0, Channel::Send { src: 0, dst: 1 }, p2p(10))])
            .expect("send #0");
        a.record(&[(0, Channel::Send { src: 0, dst: 1 }, p2p(20))])
            .expect("send #1");
        a.record(&[(1, Channel::Recv { src: 0, dst: 1 }, p2p(10))])
            .expect("recv #0");
        assert!(
            a.record(&[(1, Channel::Recv { src: 0, dst: 1 }, p2p(10))])
                .is_err(),
            "recv #1 is 20"
        );
        a.record(&[(1, Channel::Recv { src: 0, dst: 1 }, p2p(20))])
            .expect("recv #1");
        // Rank 2 lives in another process: nothing to check with it.
        a.record(&[(0, Channel::Send { src: 0, dst: 2 }, p2p(5))])
            .expect("remote peer");
        // A rank sending to itself, in one group.
        a.record(&[
            (0, Channel::Send { src: 0, dst: 0 }, p2p(3)),
            (0, Channel::Recv { src: 0, dst: 0 }, p2p(3)),
        ])
        .expect("self send and receive");
    }

    #[test]
    fn the_same_rank_twice_or_another_world_size_is_refused() {
        let key = id(5);
        let _a = Ledger::join(&key, 0, 2).expect("0");
        assert!(Ledger::join(&key, 0, 2).is_err());
        assert!(Ledger::join(&key, 1, 3).is_err());
    }

    // Red team 15, attempts 1a and 2c. `Comm::init_rank` joins the ledger before it asks
    // `refuse_inside_stream_callback` (through `make_current`); refused in a waker (or failing
    // for any reason after the join), its `Member` guard calls `leave`, which clears every
    // pending entry of the id's ledger, also those of two live local ranks that do not involve
    // the rank that left. A send of 10 from rank 0 to rank 1 is then met by a receive of 20 (or
    // the reverse), which P2P/direct pointers between local ranks turn into an out-of-bounds
    // access. The same wipe follows a real leave (a third local rank's `Comm` dropped or
    // aborted): pairs of other ranks are cleared too. Expected: the receive is refused.
    #[test]
    fn a_transient_join_and_leave_of_a_remote_rank_keeps_the_pending_entries_of_live_ranks() {
        let key = id(15);
        let (a, _b) = (
            Ledger::join(&key, 0, 3).expect("0"),
            Ledger::join(&key, 1, 3).expect("1"),
        );
        let p2p = |count| sig("send/recv", count);
        a.record(&[(0, Channel::Send { src: 0, dst: 1 }, p2p(10))])
            .expect("send #0 of 10, enqueued, pending");
        a.record(&[(0, Channel::Collective, sig("all_reduce", 10))])
            .expect("collective #0 of 10, pending");
        // What a refused `Comm::init_rank(ctx, id, 2, 3, ..)` does (join, then `Member::drop`).
        let c = Ledger::join(&key, 2, 3).expect("rank 2 is not in this process: joins");
        c.leave(2);
        assert!(
            a.record(&[(1, Channel::Recv { src: 0, dst: 1 }, p2p(20))])
                .is_err(),
            "recv #0 of 20 against a pending send of 10 was accepted after the wipe"
        );
        assert!(
            a.record(&[(1, Channel::Collective, sig("all_reduce", 20))])
                .is_err(),
            "collective #0 of 20 against a pending one of 10 was accepted after the wipe"
        );
    }

    /// Red team 15, with `leave` fixed: an entry the departed rank had reached is not complete
    /// until every remaining local rank has reached it (it is no longer counted as a party).
    #[test]
    fn a_rank_that_leaves_is_no_party_to_the_entries_it_reached() {
        let key = id(16);
        let (a, _b, c) = (
            Ledger::join(&key, 0, 3).expect("0"),
            Ledger::join(&key, 1, 3).expect("1"),
            Ledger::join(&key, 2, 3).expect("2"),
        );
        a.record(&[(0, Channel::Collective, sig("all_reduce", 10))])
            .expect("rank 0's collective #0");
        a.record(&[(2, Channel::Collective, sig("all_reduce", 10))])
            .expect("rank 2's collective #0");
        c.leave(2);
        assert!(
            a.record(&[(1, Channel::Collective, sig("all_reduce", 20))])
                .is_err(),
            "rank 1's collective #0 of 20 against ranks 0's and 2's of 10"
        );
        a.record(&[(1, Channel::Collective, sig("all_reduce", 10))])
            .expect("the matching one");
        assert!(
            a.lock().collectives.entries.is_empty(),
            "complete once both remaining ranks reached it"
        );
    }
}
