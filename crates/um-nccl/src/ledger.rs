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

use smallvec::SmallVec;

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
    /// Inline up to 8 local ranks: an entry is written and dropped on every collective.
    seen: SmallVec<[usize; 8]>,
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
    next: Numbers,
    collectives: Sequence,
    /// Per pair `(src, dst)`: the sends' and receives' next numbers and the sequence.
    pairs: HashMap<(usize, usize), (u64, u64, Sequence)>,
}

/// Per local rank, a number: a short list searched in order (a process holds a few ranks of a
/// communicator; a hash of the rank costs more than the search on every call).
#[derive(Debug, Default)]
struct Numbers(Vec<(usize, u64)>);

impl Numbers {
    fn entry_or(&mut self, rank: usize, first: u64) -> &mut u64 {
        let i = match self.0.iter().position(|(r, _)| *r == rank) {
            Some(i) => i,
            None => {
                self.0.push((rank, first));
                self.0.len() - 1
            }
        };
        &mut self.0[i].1
    }

    fn get_mut(&mut self, rank: usize) -> Option<&mut u64> {
        self.0.iter_mut().find(|(r, _)| *r == rank).map(|(_, n)| n)
    }

    #[cfg(test)]
    fn get(&self, rank: usize) -> Option<&u64> {
        self.0.iter().find(|(r, _)| *r == rank).map(|(_, n)| n)
    }

    fn remove(&mut self, rank: usize) {
        self.0.retain(|(r, _)| *r != rank);
    }

    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = (&usize, &u64)> {
        self.0.iter().map(|(r, n)| (r, n))
    }
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

/// The first bytes of a unique id: NCCL's bootstrap magic (`ncclBootstrapHandle::magic`, random
/// per `ncclGetUniqueId`), which every rank of one NCCL communicator shares, since the
/// bootstrap's handshake refuses a peer of another magic.
const MAGIC_BYTES: usize = 8;

/// The ledgers of this process, by the magic of their unique id. Not by the whole id: NCCL
/// reads only the magic and the root's address from it, and hashes all 128 bytes (not a
/// cryptographic hash) to decide which ranks share a host and a process, so two crafted ids
/// that differ only in bytes NCCL never reads could make one communicator with direct pointers
/// between two ledgers that never compare their calls. Keyed by the
/// magic, ranks of one communicator always share a ledger; ids of one magic that are not one
/// communicator share one too, which can only refuse (a rank claimed twice, another world
/// size, a mismatch), never let a mismatch through.
type Registry = HashMap<[u8; MAGIC_BYTES], Weak<Ledger>>;

/// The ledgers of this process, by the magic of their unique id.
fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Ledger {
    /// Joins (or starts) the ledger of the communicator of `id` (by its magic, see [`Registry`])
    /// as `rank` of `world_size`.
    pub(crate) fn join(
        id: &[u8; UNIQUE_ID_BYTES],
        rank: usize,
        world_size: usize,
    ) -> Result<Arc<Ledger>> {
        let mut magic = [0u8; MAGIC_BYTES];
        magic.copy_from_slice(&id[..MAGIC_BYTES]);
        let mut reg = registry();
        reg.retain(|_, w| w.strong_count() > 0);
        let ledger = match reg.get(&magic).and_then(Weak::upgrade) {
            Some(l) => l,
            None => {
                let l = Arc::new(Ledger::default());
                reg.insert(magic, Arc::downgrade(&l));
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
                        "two communicators of one unique id (or of ids with one magic, its first 8 \
                         bytes) in this process disagree on the world size ({} and {world_size})",
                        st.world_size
                    ),
                });
            }
            if st.members.contains(&rank) {
                return Err(Error::Bootstrap {
                    reason: format!(
                        "rank {rank} of this unique id (or of an id with its magic, its first 8 \
                         bytes) already has a communicator in this process"
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
    /// pending send of 10 between two other local ranks (with direct pointers
    /// between local ranks, an access past a buffer). An entry only the departed rank wrote
    /// stays too: the remaining ranks are checked against it (conservative: the departed rank's
    /// kernel may have used it).
    pub(crate) fn leave(&self, rank: usize) {
        let mut st = self.lock();
        st.members.retain(|r| *r != rank);
        st.next.remove(rank);
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

    /// Tests: the state, printed (to compare two ledgers that saw the same calls).
    #[cfg(test)]
    pub(crate) fn state_text(&self) -> String {
        let st = self.lock();
        let mut next = st.next.0.clone();
        next.sort_unstable();
        let mut pairs: Vec<_> = st.pairs.iter().collect();
        pairs.sort_by_key(|(k, _)| **k);
        format!(
            "members {:?} next {next:?} collectives {:?} pairs {pairs:?}",
            st.members, st.collectives
        )
    }

    /// Records the calls of one group (or one call) of this ledger's ranks, all or none:
    /// `(rank, channel, sig)` each.
    #[cfg(test)]
    fn record(&self, calls: &[(usize, Channel, Sig)]) -> Result<()> {
        record_all(calls.iter().map(|&(r, c, s)| (self, r, c, s)))
    }
}

/// Records the calls of one group, whose communicators may belong to several ledgers: all or
/// none. `calls` yields `(ledger, rank, channel, sig)` per call, and is walked twice. Each
/// shared ledger is locked once, in address order (so two threads never wait for each other's
/// locks), and a call that does not match takes back every call recorded before it. A group of
/// a few calls on a few ledgers allocates nothing.
pub(crate) fn record_all<'l, I>(calls: I) -> Result<()>
where
    I: Iterator<Item = (&'l Ledger, usize, Channel, Sig)> + Clone,
{
    if lockstep_allowed() && record_lockstep(calls.clone()) {
        return Ok(());
    }
    let mut ledgers: SmallVec<[&Ledger; 4]> = SmallVec::new();
    for (l, ..) in calls.clone() {
        if l.shared() && !ledgers.iter().any(|m| std::ptr::eq(*m, l)) {
            ledgers.push(l);
        }
    }
    if ledgers.is_empty() {
        return Ok(());
    }
    ledgers.sort_by_key(|l| std::ptr::from_ref::<Ledger>(l) as usize);
    let mut guards: SmallVec<[MutexGuard<'_, State>; 4]> =
        ledgers.iter().map(|l| l.lock()).collect();
    let mut undo: SmallVec<[(usize, Undo); 8]> = SmallVec::new();
    for (ledger, rank, channel, sig) in calls {
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

#[cfg(test)]
thread_local! {
    /// Tests: the general path only (`ledger_model.rs` compares the two paths).
    pub(crate) static GENERAL_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Tests: how many groups took the lockstep path on this thread.
    pub(crate) static LOCKSTEP_TAKEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn lockstep_allowed() -> bool {
    #[cfg(test)]
    return !GENERAL_ONLY.with(std::cell::Cell::get);
    #[cfg(not(test))]
    true
}

/// The common group, recorded directly: one collective for each local rank of one shared
/// ledger, all of one signature, with nothing pending. Such a group agrees with itself and
/// with the history (every earlier collective was matched by every rank), and its effect is
/// the general path's: each rank's number and the sequence's base advance by one, nothing
/// stays pending. `false` (nothing recorded) for any other group, which takes the general
/// path; `ledger_model.rs` checks both against the model.
fn record_lockstep<'l, I>(mut calls: I) -> bool
where
    I: Iterator<Item = (&'l Ledger, usize, Channel, Sig)> + Clone,
{
    let all = calls.clone();
    let Some((ledger, _, Channel::Collective, sig)) = calls.next() else {
        return false;
    };
    let mut n = 1;
    let alike = calls.all(|(l, _, c, s)| {
        n += 1;
        std::ptr::eq(l, ledger) && c == Channel::Collective && s == sig
    });
    if !alike || n < 2 || ledger.members.load(Ordering::Acquire) != n {
        return false;
    }
    ledger.lock().lockstep(all.map(|(_, rank, ..)| rank), n)
}

impl State {
    /// [`record_lockstep`] under the lock: `ranks` (`n` of them) must be the members, each
    /// once, every one at the sequence's base with nothing pending.
    fn lockstep(&mut self, ranks: impl Iterator<Item = usize> + Clone, n: usize) -> bool {
        if self.members.len() != n || !self.collectives.entries.is_empty() {
            return false;
        }
        let base = self.collectives.base;
        // With nothing pending every member is at the base (an entry is pushed by the first
        // rank to reach it, and popped once every member has): `at_base` is a second guard.
        // Nothing pending is the first: a rank that left with a call of its own pending leaves
        // an entry no member has seen while every member is still at the base.
        for (i, rank) in ranks.clone().enumerate() {
            let at_base = self.next.0.iter().all(|(r, k)| *r != rank || *k == base);
            if !self.is_member(rank) || !at_base || ranks.clone().take(i).any(|q| q == rank) {
                return false;
            }
        }
        for rank in ranks {
            *self.next.entry_or(rank, base) += 1;
        }
        self.collectives.base += 1;
        #[cfg(test)]
        LOCKSTEP_TAKEN.with(|t| t.set(t.get() + 1));
        true
    }

    fn is_member(&self, rank: usize) -> bool {
        self.members.contains(&rank)
    }

    /// The sequence of `channel` and the number of `rank`'s next call on it, advanced.
    fn advance(&mut self, rank: usize, channel: Channel) -> (&mut Sequence, u64) {
        match channel {
            Channel::Collective => {
                let n = self.next.entry_or(rank, self.collectives.base);
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
        // Only a member records: `Comm` checks that it is live (not left) before every call, and
        // a rank that left would mark entries as a party it no longer is.
        debug_assert!(self.is_member(rank), "rank {rank} records after it left");
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
                let mut seen = SmallVec::new();
                seen.push(rank);
                seq.entries.push_back(Entry {
                    sig,
                    first: rank,
                    seen,
                });
                Ok(Undo::Pushed(channel, rank))
            }
        }
    }

    fn retreat(&mut self, rank: usize, channel: Channel) {
        match channel {
            Channel::Collective => {
                if let Some(n) = self.next.get_mut(rank) {
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
                // One mark: a rank's send and receive to itself both mark one pair's entry, and
                // taking back one of them must keep the other.
                if let Some(entry) = self.sequence(channel).and_then(|s| s.entries.get_mut(at)) {
                    if let Some(i) = entry.seen.iter().rposition(|r| *r == rank) {
                        entry.seen.remove(i);
                    }
                }
            }
        }
    }

    /// Drops the entries every party has reached.
    fn compact(&mut self) {
        let members = self.parties(Channel::Collective);
        pop_complete(&mut self.collectives, members);
        if self.pairs.is_empty() {
            return;
        }
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

    /// Ids that differ only past the magic (bytes NCCL's bootstrap never
    /// reads, but hashes to tell hosts and processes apart) share one ledger, so their ranks'
    /// calls are compared.
    #[test]
    fn ids_of_one_magic_share_a_ledger() {
        let a = id(41);
        let mut b = a;
        b[MAGIC_BYTES] ^= 0xff;
        b[UNIQUE_ID_BYTES - 1] ^= 0x5a;
        let r0 = Ledger::join(&a, 0, 2).expect("rank 0");
        let r1 = Ledger::join(&b, 1, 2).expect("rank 1, same magic");
        assert!(Arc::ptr_eq(&r0, &r1), "two ledgers for one magic");
        assert!(r0.shared());
        let twice = Ledger::join(&b, 0, 2).expect_err("rank 0 claimed twice");
        assert!(
            twice.to_string().contains("already has a communicator"),
            "{twice}"
        );
        let mut c = a;
        c[0] ^= 0xff;
        let other = Ledger::join(&c, 0, 2).expect("another magic");
        assert!(!Arc::ptr_eq(&r0, &other));
        for (l, r) in [(&r0, 0), (&r1, 1), (&other, 0)] {
            l.leave(r);
        }
    }

    /// The lockstep path: a rank that left with a call of its own pending
    /// leaves an entry no member has seen, every member still at the base. A group of the
    /// lockstep shape must be compared with it (the general path), not recorded past it.
    #[test]
    fn a_departed_ranks_pending_call_keeps_the_lockstep_path_out() {
        let key = id(20);
        let ranks = [
            Ledger::join(&key, 0, 3).expect("0"),
            Ledger::join(&key, 1, 3).expect("1"),
            Ledger::join(&key, 2, 3).expect("2"),
        ];
        let l = &ranks[0];
        l.record(&[(2, Channel::Collective, sig("all_reduce", 10))])
            .expect("2's first, pending");
        l.leave(2);
        let both = |count| [0, 1].map(|r| (r, Channel::Collective, sig("all_reduce", count)));
        let err = l.record(&both(20)).expect_err("20 against the pending 10");
        assert!(matches!(err, Error::CollectiveMismatch { .. }), "{err}");
        l.record(&both(10)).expect("the matching pair");
        let st = l.lock();
        assert!(st.collectives.entries.is_empty(), "{st:?}");
        assert_eq!(st.collectives.base, 1);
    }

    /// The lockstep path, with a race made deterministic: a rank joins after the
    /// lock-free count of members said two and before the lock. Under the lock the group of
    /// two is not every member: `lockstep` refuses it, changing nothing, and the general path
    /// leaves the entry pending for the new rank.
    #[test]
    fn a_member_who_joined_after_the_count_keeps_the_lockstep_path_out() {
        let key = id(21);
        let l = Ledger::join(&key, 0, 3).expect("0");
        let _one = Ledger::join(&key, 1, 3).expect("1");
        let _two = Ledger::join(&key, 2, 3).expect("2");
        let before = l.state_text();
        assert!(!l.lock().lockstep([0, 1].into_iter(), 2));
        assert_eq!(l.state_text(), before);
        let pair = [0, 1].map(|r| (r, Channel::Collective, sig("all_reduce", 10)));
        l.record(&pair).expect("0's and 1's first");
        l.record(&[(2, Channel::Collective, sig("all_reduce", 20))])
            .expect_err("2's first of 20 against the pair's 10");
        l.record(&[(2, Channel::Collective, sig("all_reduce", 10))])
            .expect("2's first of 10");
        assert!(l.lock().collectives.entries.is_empty());
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

    // `Comm::init_rank` joins the ledger before it asks
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

    /// An entry the departed rank had reached is not complete
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

    // ---- `leave`, re-joins, groups, a model check ----

    fn ledger_invariants(l: &Ledger) {
        let st = l.lock();
        for e in &st.collectives.entries {
            for r in &e.seen {
                assert!(
                    st.members.contains(r),
                    "seen {r} is no member: {:?}",
                    st.members
                );
            }
            let mut s = e.seen.clone();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), e.seen.len(), "duplicate in seen");
        }
        for (r, n) in st.next.iter() {
            assert!(st.members.contains(r), "next of non-member {r}");
            assert!(
                *n >= st.collectives.base,
                "rank {r}: next {n} < base {}",
                st.collectives.base
            );
            let end = st.collectives.base + st.collectives.entries.len() as u64;
            assert!(*n <= end, "rank {r}: next {n} past the last entry {end}");
        }
        for (&(src, dst), (s, r, seq)) in &st.pairs {
            assert!(
                st.members.contains(&src) && st.members.contains(&dst),
                "stale pair"
            );
            assert!(
                *s >= seq.base && *r >= seq.base,
                "pair ({src},{dst}) counter behind base"
            );
        }
        assert_eq!(l.members.load(Ordering::Acquire), st.members.len());
    }

    /// leave of a rank that never joined, and leave twice: the live pair keeps its entries.
    #[test]
    fn leave_of_a_stranger_and_twice_keeps_live_entries() {
        let key = id(160);
        let (a, _b) = (
            Ledger::join(&key, 0, 4).expect("0"),
            Ledger::join(&key, 1, 4).expect("1"),
        );
        let p2p = |count| sig("send/recv", count);
        a.record(&[(0, Channel::Send { src: 0, dst: 1 }, p2p(10))])
            .expect("send");
        a.record(&[(0, Channel::Collective, sig("all_reduce", 10))])
            .expect("coll");
        a.leave(3); // never joined
        let c = Ledger::join(&key, 2, 4).expect("2");
        c.leave(2);
        c.leave(2); // twice
        a.leave(3);
        ledger_invariants(&a);
        assert!(a.shared(), "0 and 1 still share");
        assert!(
            a.record(&[(1, Channel::Recv { src: 0, dst: 1 }, p2p(20))])
                .is_err()
        );
        assert!(
            a.record(&[(1, Channel::Collective, sig("all_reduce", 20))])
                .is_err()
        );
        a.record(&[(1, Channel::Recv { src: 0, dst: 1 }, p2p(10))])
            .expect("recv 10");
        a.record(&[(1, Channel::Collective, sig("all_reduce", 10))])
            .expect("coll 10");
        ledger_invariants(&a);
        let st = a.lock();
        assert!(st.collectives.entries.is_empty());
        assert!(st.pairs.values().all(|p| p.2.entries.is_empty()));
    }

    /// A departed rank's entries (seen emptied) stay: both remaining ranks are held to them,
    /// then they compact; base ends equal to every rank's next.
    #[test]
    fn entries_with_empty_seen_are_checked_and_compacted() {
        let key = id(161);
        let (a, _b, c) = (
            Ledger::join(&key, 0, 3).expect("0"),
            Ledger::join(&key, 1, 3).expect("1"),
            Ledger::join(&key, 2, 3).expect("2"),
        );
        for n in [10, 11, 12] {
            a.record(&[(2, Channel::Collective, sig("all_reduce", n))])
                .expect("2 ahead");
        }
        a.record(&[(0, Channel::Collective, sig("all_reduce", 10))])
            .expect("0 #0");
        c.leave(2);
        ledger_invariants(&a);
        assert_eq!(a.lock().collectives.entries.len(), 3);
        assert!(
            a.record(&[(1, Channel::Collective, sig("all_reduce", 99))])
                .is_err()
        );
        a.record(&[(1, Channel::Collective, sig("all_reduce", 10))])
            .expect("1 #0");
        ledger_invariants(&a);
        // In one group, both ranks, #1 and #2; then one mismatch at #3 (past the old entries).
        a.record(&[
            (0, Channel::Collective, sig("all_reduce", 11)),
            (1, Channel::Collective, sig("all_reduce", 11)),
            (1, Channel::Collective, sig("all_reduce", 12)),
            (0, Channel::Collective, sig("all_reduce", 12)),
        ])
        .expect("#1, #2");
        ledger_invariants(&a);
        a.record(&[(0, Channel::Collective, sig("all_reduce", 13))])
            .expect("0 #3");
        assert!(
            a.record(&[(1, Channel::Collective, sig("all_reduce", 14))])
                .is_err()
        );
        a.record(&[(1, Channel::Collective, sig("all_reduce", 13))])
            .expect("1 #3");
        let st = a.lock();
        assert!(st.collectives.entries.is_empty());
        assert_eq!(st.collectives.base, 4);
        assert_eq!(st.next.get(0), Some(&4));
        assert_eq!(st.next.get(1), Some(&4));
    }

    /// A rank re-joining with its old number starts at base (its old `next` is gone): it is held
    /// to the pending entries, and its pairs start afresh; the live ranks stay checked.
    #[test]
    fn rejoin_with_the_same_number() {
        let key = id(162);
        let (a, _b, c) = (
            Ledger::join(&key, 0, 3).expect("0"),
            Ledger::join(&key, 1, 3).expect("1"),
            Ledger::join(&key, 2, 3).expect("2"),
        );
        let p2p = |count| sig("send/recv", count);
        a.record(&[(2, Channel::Collective, sig("all_reduce", 10))])
            .expect("2 #0");
        a.record(&[(2, Channel::Collective, sig("all_reduce", 11))])
            .expect("2 #1");
        a.record(&[(0, Channel::Collective, sig("all_reduce", 10))])
            .expect("0 #0");
        a.record(&[(2, Channel::Send { src: 2, dst: 0 }, p2p(7))])
            .expect("2->0 pending");
        a.record(&[(0, Channel::Send { src: 0, dst: 1 }, p2p(5))])
            .expect("0->1 pending");
        c.leave(2);
        assert!(Ledger::join(&key, 2, 3).is_ok(), "re-join as 2");
        ledger_invariants(&a);
        // The new 2's pair with 0 starts afresh (the old send of 7 is gone with the old 2).
        a.record(&[(0, Channel::Recv { src: 2, dst: 0 }, p2p(9))])
            .expect("fresh pair");
        assert!(
            a.record(&[(2, Channel::Send { src: 2, dst: 0 }, p2p(8))])
                .is_err()
        );
        // The new 2 is held to collective #0 (10) and #1 (11) from base 0.
        assert!(
            a.record(&[(2, Channel::Collective, sig("all_reduce", 99))])
                .is_err()
        );
        a.record(&[(2, Channel::Collective, sig("all_reduce", 10))])
            .expect("new 2 #0");
        // 0 and 1 still checked.
        assert!(
            a.record(&[(1, Channel::Recv { src: 0, dst: 1 }, p2p(6))])
                .is_err()
        );
        assert!(
            a.record(&[(1, Channel::Collective, sig("all_reduce", 20))])
                .is_err()
        );
        a.record(&[(1, Channel::Collective, sig("all_reduce", 10))])
            .expect("1 #0");
        ledger_invariants(&a);
        assert_eq!(a.lock().collectives.base, 1, "#0 complete for 0, 1, new 2");
        c.leave(2);
        a.record(&[(0, Channel::Collective, sig("all_reduce", 11))])
            .expect("0 #1");
        a.record(&[(1, Channel::Collective, sig("all_reduce", 11))])
            .expect("1 #1");
        ledger_invariants(&a);
        assert!(a.lock().collectives.entries.is_empty());
    }

    /// Leaves down to one member (unchecked), then a transient join: the survivor's stale
    /// `next` and the departed rank's entry are compared with its later calls.
    #[test]
    fn down_to_one_member_then_a_transient_join() {
        let key = id(163);
        let (a, b, c) = (
            Ledger::join(&key, 0, 4).expect("0"),
            Ledger::join(&key, 1, 4).expect("1"),
            Ledger::join(&key, 2, 4).expect("2"),
        );
        a.record(&[(2, Channel::Collective, sig("all_reduce", 10))])
            .expect("2 #0");
        c.leave(2);
        b.leave(1);
        assert!(!a.shared());
        // Unchecked now: rank 0 makes collectives of 20 that are not recorded.
        a.record(&[(0, Channel::Collective, sig("all_reduce", 20))])
            .expect("unchecked");
        // Entry #0 (10, seen by nobody) survives with one party left.
        assert_eq!(
            a.lock().collectives.entries.len(),
            1,
            "seen-empty entry kept"
        );
        let t = Ledger::join(&key, 3, 4).expect("transient 3");
        ledger_invariants(&a);
        let r = a.record(&[(0, Channel::Collective, sig("all_reduce", 20))]);
        t.leave(3);
        ledger_invariants(&a);
        // Documented as conservative; with ranks 1 and 2 destroyed the collective cannot
        // complete in NCCL anyway, so the refusal costs a correct program nothing.
        assert!(
            r.is_err(),
            "rank 0's 20 is compared with departed rank 2's 10"
        );
    }

    /// Model check: ranks 0 and 1 stay, 2 and 3 come and go. Every accepted call of 0 and 1
    /// must agree with the other's accepted call of the same number (collective, and sends of
    /// 0->1 against receives of 1->... i.e. pair (0,1)); the invariants hold after each step.
    #[test]
    fn model_stayers_never_disagree() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for round in 0..200u8 {
            let mut key = id(0);
            key[2] = round;
            key[3] = 0x16;
            let l = Ledger::join(&key, 0, 4).expect("0");
            let _l1 = Ledger::join(&key, 1, 4).expect("1");
            let mut joined = [true, true, false, false];
            let mut coll: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
            let (mut sends, mut recvs) = (Vec::new(), Vec::new());
            for _ in 0..300 {
                let count = 10 + rnd(3) as usize;
                match rnd(10) {
                    0 | 1 => {
                        let r = rnd(2) as usize;
                        if l.record(&[(r, Channel::Collective, sig("all_reduce", count))])
                            .is_ok()
                        {
                            coll[r].push(count);
                        }
                    }
                    2 => {
                        if l.record(&[(0, Channel::Send { src: 0, dst: 1 }, sig("p", count))])
                            .is_ok()
                        {
                            sends.push(count);
                        }
                    }
                    3 => {
                        if l.record(&[(1, Channel::Recv { src: 0, dst: 1 }, sig("p", count))])
                            .is_ok()
                        {
                            recvs.push(count);
                        }
                    }
                    4 => {
                        // A group of both stayers and a churner.
                        let ch = 2 + rnd(2) as usize;
                        let mut calls = vec![
                            (0, Channel::Collective, sig("all_reduce", count)),
                            (
                                1,
                                Channel::Collective,
                                sig("all_reduce", 10 + rnd(3) as usize),
                            ),
                        ];
                        if joined[ch] {
                            calls.push((
                                ch,
                                Channel::Collective,
                                sig("all_reduce", 10 + rnd(3) as usize),
                            ));
                        }
                        if l.record(&calls).is_ok() {
                            coll[0].push(calls[0].2.count);
                            coll[1].push(calls[1].2.count);
                        }
                    }
                    5 | 6 => {
                        let ch = 2 + rnd(2) as usize;
                        if joined[ch] {
                            let c = match rnd(3) {
                                0 => Channel::Collective,
                                1 => Channel::Send {
                                    src: ch,
                                    dst: rnd(2) as usize,
                                },
                                _ => Channel::Recv {
                                    src: rnd(2) as usize,
                                    dst: ch,
                                },
                            };
                            let _ = l.record(&[(ch, c, sig("all_reduce", count))]);
                        }
                    }
                    7 | 8 => {
                        let ch = 2 + rnd(2) as usize;
                        if joined[ch] {
                            l.leave(ch);
                            joined[ch] = false;
                        } else {
                            Ledger::join(&key, ch, 4).expect("re-join");
                            joined[ch] = true;
                        }
                    }
                    _ => l.leave(2 + rnd(3) as usize), // may be a stranger, or twice
                }
                // The `_` arm above may have made 2 or 3 leave behind the model's back.
                {
                    let st = l.lock();
                    for (ch, j) in joined.iter_mut().enumerate().skip(2).take(2) {
                        *j = st.members.contains(&ch);
                    }
                }
                ledger_invariants(&l);
                let k = coll[0].len().min(coll[1].len());
                assert_eq!(
                    coll[0][..k],
                    coll[1][..k],
                    "round {round}: collectives disagree"
                );
                let k = sends.len().min(recvs.len());
                assert_eq!(
                    sends[..k],
                    recvs[..k],
                    "round {round}: pair (0,1) disagrees"
                );
            }
        }
    }

    /// Liveness: a correct program (every rank the same script), a third rank leaving at any
    /// point: the two remaining ranks are never refused.
    #[test]
    fn correct_program_never_refused_after_a_leave() {
        let script: Vec<usize> = (0..40).map(|i| 10 + (i * 7) % 5).collect();
        for leave_at in 0..40 {
            for lead in 0..3usize {
                let mut key = id(0);
                key[2] = leave_at as u8;
                key[3] = 0x17 + lead as u8;
                let l = Ledger::join(&key, 0, 3).expect("0");
                let _b = Ledger::join(&key, 1, 3).expect("1");
                let _c = Ledger::join(&key, 2, 3).expect("2");
                let mut pos = [0usize; 3];
                let mut step = 0;
                let mut two_left = true;
                while pos[0] < 40 || pos[1] < 40 {
                    step += 1;
                    // The leader runs ahead by a few calls.
                    let r = if step % 3 == 0 { (lead + 1) % 3 } else { lead };
                    let r = if r == 2 && !two_left { step % 2 } else { r };
                    if r == 2 && pos[2] == leave_at {
                        l.leave(2);
                        two_left = false;
                        continue;
                    }
                    let r = if pos[r] >= 40 {
                        (0..2).find(|&x| pos[x] < 40).unwrap()
                    } else {
                        r
                    };
                    l.record(&[(r, Channel::Collective, sig("all_reduce", script[pos[r]]))])
                        .unwrap_or_else(|e| panic!("leave_at {leave_at} lead {lead}: {e}"));
                    pos[r] += 1;
                    ledger_invariants(&l);
                }
            }
        }
    }

    /// Self pair (send and receive of rank 0 to itself): a group whose receive is taken back
    /// (`Undo::Seen`) removes *both* of rank 0's marks from the entry (`retain`), so an entry
    /// sent in an earlier group is never complete again: pair entries pile up (leak only).
    #[test]
    fn self_pair_revert_strips_both_marks() {
        let key = id(165);
        let (a, _b) = (
            Ledger::join(&key, 0, 2).expect("0"),
            Ledger::join(&key, 1, 2).expect("1"),
        );
        let p2p = |count| sig("send/recv", count);
        let (s, r) = (
            Channel::Send { src: 0, dst: 0 },
            Channel::Recv { src: 0, dst: 0 },
        );
        a.record(&[(0, s, p2p(4))]).expect("send to self (group 1)");
        assert!(
            a.record(&[
                (0, r, p2p(4)),
                (0, Channel::Collective, sig("x", 1)),
                (1, Channel::Collective, sig("x", 2))
            ])
            .is_err()
        );
        a.record(&[(0, r, p2p(4))]).expect("recv to self (group 3)");
        for _ in 0..5 {
            a.record(&[(0, s, p2p(4)), (0, r, p2p(4))])
                .expect("self pairs");
        }
        let left = a.lock().pairs.get(&(0, 0)).map_or(0, |p| p.2.entries.len());
        assert_eq!(left, 0, "self-pair entries never compacted: {left}");
    }
}
