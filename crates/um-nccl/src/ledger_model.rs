//! The ledger against a model of its rule, on random groups (CPU only). The rule, for ranks
//! that all stay: every local rank's `n`-th collective has one signature, and the `n`-th send
//! from `src` to `dst` has the signature of the `n`-th receive there; a group is recorded whole
//! or not at all; a point-to-point call with a rank of another process is not checked. The
//! model keeps every accepted call; a group is accepted iff its calls, added in order, keep the
//! rule. Over long runs a refused group that left anything behind would make a later answer
//! differ. (Departures are tested one by one in `ledger.rs`.)

use std::collections::HashMap;
use std::sync::Arc;

use crate::ledger::{Channel, Ledger, Sig, record_all};
use crate::sys::UNIQUE_ID_BYTES;

struct Rng(u64);

impl Rng {
    fn below(&mut self, m: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % m
    }
}

/// Where a call's signature is compared: one list per rank (collectives), or per pair and
/// direction; `other` names the lists whose entry at the same place must agree.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Line {
    Collective(usize),
    Send(usize, usize),
    Recv(usize, usize),
}

/// One ledger's accepted history (`members`: its local ranks).
#[derive(Clone, Default)]
struct Model {
    members: Vec<usize>,
    lines: HashMap<Line, Vec<Sig>>,
}

impl Model {
    fn line(rank: usize, channel: Channel) -> Line {
        match channel {
            Channel::Collective => Line::Collective(rank),
            Channel::Send { src, dst } => Line::Send(src, dst),
            Channel::Recv { src, dst } => Line::Recv(src, dst),
        }
    }

    fn others(&self, line: Line) -> Vec<Line> {
        match line {
            Line::Collective(r) => self
                .members
                .iter()
                .filter(|m| **m != r)
                .map(|m| Line::Collective(*m))
                .collect(),
            Line::Send(s, d) => vec![Line::Recv(s, d)],
            Line::Recv(s, d) => vec![Line::Send(s, d)],
        }
    }

    /// Adds one call if it keeps the rule; `false` (nothing added) if not.
    fn add(&mut self, rank: usize, channel: Channel, sig: Sig) -> bool {
        if self.members.len() < 2 {
            return true; // nothing to agree on: not recorded
        }
        if let Channel::Send { src, dst } | Channel::Recv { src, dst } = channel {
            if !(self.members.contains(&src) && self.members.contains(&dst)) {
                return true; // a peer in another process: not checked
            }
        }
        let line = Self::line(rank, channel);
        let n = self.lines.get(&line).map_or(0, Vec::len);
        for other in self.others(line) {
            if let Some(theirs) = self.lines.get(&other).and_then(|l| l.get(n)) {
                if *theirs != sig {
                    return false;
                }
            }
        }
        self.lines.entry(line).or_default().push(sig);
        true
    }
}

/// An id whose magic (its first 8 bytes, which find the ledger) is distinct per seed and
/// `which`, and far from the ledger tests' ids (`[n, 0xa5, 0, ..]`).
fn id(seed: u64, which: usize) -> [u8; UNIQUE_ID_BYTES] {
    let mut id = [0u8; UNIQUE_ID_BYTES];
    let magic = (seed ^ 0x6d6f_6465_6c00_0000).wrapping_add((which as u64 + 1) << 48);
    id[..8].copy_from_slice(&magic.to_le_bytes());
    id[8..16].copy_from_slice(&seed.to_le_bytes());
    id
}

/// A signature: mostly one all-reduce of 10; one in `odd` has another count or kind.
fn any_sig(rng: &mut Rng, odd: u64) -> Sig {
    Sig {
        kind: if rng.below(odd) == 0 {
            "broadcast"
        } else {
            "all_reduce"
        },
        dtype: "ncclFloat32",
        count: 10 + usize::from(rng.below(odd) == 0),
        op: Some(0),
        root: None,
    }
}

/// A group of the lockstep path's shape: one collective for each local rank of one ledger,
/// in a random order, each with `any_sig` (so now and then one differs).
fn lockstep_group(rng: &mut Rng, ranks: &[(usize, Arc<Ledger>)], odd: u64) -> Vec<Call> {
    let mut order: Vec<usize> = (0..ranks.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let sig = any_sig(rng, odd);
    order
        .into_iter()
        .map(|i| {
            let s = if rng.below(odd * 4) == 0 {
                any_sig(rng, 1)
            } else {
                sig
            };
            (Arc::clone(&ranks[i].1), ranks[i].0, Channel::Collective, s)
        })
        .collect()
}

type Call = (Arc<Ledger>, usize, Channel, Sig);

/// `rounds` fresh pairs of ledgers (world sizes 2 to 9, some ranks remote), 200 groups of 1 to
/// 6 calls each over both; one call in `odd` has another count or kind. With `lockstep` above
/// 0, one group in `lockstep` has the lockstep path's shape instead (`lockstep_group`).
fn run(seed: u64, rounds: u64, odd: u64, lockstep: u64) -> (u64, u64) {
    let mut rng = Rng(seed);
    let (mut accepted, mut refused) = (0, 0);
    for round in 0..rounds {
        let mut ledgers: Vec<Vec<(usize, Arc<Ledger>)>> = Vec::new();
        let mut models = Vec::new();
        let mut worlds = Vec::new();
        for which in 0..2 {
            let world = 2 + rng.below(8) as usize;
            let key = id(seed ^ (round << 8), which);
            let mut joined = Vec::new();
            let mut model = Model::default();
            for rank in 0..world {
                if rng.below(5) != 0 {
                    joined.push((rank, Ledger::join(&key, rank, world).expect("join")));
                    model.members.push(rank);
                }
            }
            ledgers.push(joined);
            models.push(model);
            worlds.push(world);
        }
        for _ in 0..200 {
            let mut calls = Vec::new();
            if lockstep > 0 && rng.below(lockstep) == 0 {
                let which = rng.below(2) as usize;
                for (l, r, c, sig) in lockstep_group(&mut rng, &ledgers[which], odd) {
                    calls.push((which, l, r, c, sig));
                }
            }
            let singles = if calls.is_empty() {
                1 + rng.below(6)
            } else {
                0
            };
            for _ in 0..singles {
                let which = rng.below(2) as usize;
                if ledgers[which].is_empty() {
                    continue;
                }
                let (rank, ledger) =
                    &ledgers[which][rng.below(ledgers[which].len() as u64) as usize];
                let peer = rng.below(worlds[which] as u64) as usize;
                let channel = match rng.below(4) {
                    0 | 1 => Channel::Collective,
                    2 => Channel::Send {
                        src: *rank,
                        dst: peer,
                    },
                    _ => Channel::Recv {
                        src: peer,
                        dst: *rank,
                    },
                };
                let sig = any_sig(&mut rng, odd);
                calls.push((which, Arc::clone(ledger), *rank, channel, sig));
            }
            let mut next = models.clone();
            let expected = calls
                .iter()
                .all(|(which, _, rank, channel, sig)| next[*which].add(*rank, *channel, *sig));
            let got = record_all(calls.iter().map(|(_, l, r, c, s)| (&**l, *r, *c, *s)));
            assert_eq!(
                got.is_ok(),
                expected,
                "round {round}: the ledger said {got:?} to {:?}",
                calls
                    .iter()
                    .map(|(w, _, r, c, s)| (w, r, c, s.kind, s.count))
                    .collect::<Vec<_>>()
            );
            if expected {
                models = next;
                accepted += 1;
            } else {
                refused += 1;
            }
        }
    }
    (accepted, refused)
}

#[test]
fn the_ledger_accepts_a_group_exactly_when_the_model_does() {
    // Mostly agreeing calls (long pending sequences), then a refusal in about every other group.
    for (seed, odd) in [(0x2545_f491_4f6c_dd1d, 40), (0x9e37_79b9_7f4a_7c15, 6)] {
        let (accepted, refused) = run(seed, 150, odd, 0);
        assert!(
            accepted > 3_000 && refused > 3_000,
            "too few of one answer to test anything: {accepted} accepted, {refused} refused"
        );
    }
}

#[test]
fn groups_of_the_lockstep_shape_are_accepted_exactly_when_the_model_does() {
    // One group in three of the lockstep path's shape, the rest as above.
    for (seed, odd) in [(0x51_7cc1_b727_220a, 40), (0x2d35_8dcc_aa6c_78a5, 6)] {
        crate::ledger::LOCKSTEP_TAKEN.with(|t| t.set(0));
        let (accepted, refused) = run(seed, 150, odd, 3);
        let taken = crate::ledger::LOCKSTEP_TAKEN.with(std::cell::Cell::get);
        assert!(
            accepted > 3_000 && refused > 1_000 && taken > 100,
            "too few of one answer or path: {accepted} accepted, {refused} refused, {taken} lockstep"
        );
    }
}

/// The lockstep path and the general path, on two ledgers given the same groups: the same
/// answer to every group (the same error text) and the same state after it. Fresh ledgers
/// every 30 groups; groups mostly of the lockstep shape, the rest single collectives of one
/// rank (pending entries), and now and then a rank leaves (its communicator dropped) or joins
/// again, so that both paths run from many kinds of state.
#[test]
fn the_lockstep_path_leaves_the_state_the_general_path_leaves() {
    let mut rng = Rng(0x94d0_49bb_1331_11eb);
    let (mut taken, mut general, mut leaves) = (0, 0, 0);
    for round in 0..1_000u64 {
        let world = 2 + rng.below(5) as usize;
        let keys = [0, 1].map(|side| id(0x1ead_5eed ^ (round << 8), 2 + side));
        // The ranks of this process now, each with its ledger on either side.
        let mut sides: Vec<Vec<(usize, Arc<Ledger>)>> = vec![Vec::new(), Vec::new()];
        for r in (0..world).filter(|_| rng.below(6) != 0) {
            for (side, key) in keys.iter().enumerate() {
                sides[side].push((r, Ledger::join(key, r, world).expect("join")));
            }
        }
        for _ in 0..30 {
            if rng.below(15) == 0 {
                // A rank leaves, or one that is not here joins.
                let here: Vec<usize> = sides[0].iter().map(|(r, _)| *r).collect();
                let away: Vec<usize> = (0..world).filter(|r| !here.contains(r)).collect();
                if !here.is_empty() && (away.is_empty() || rng.below(2) == 0) {
                    let i = rng.below(here.len() as u64) as usize;
                    for side in &mut sides {
                        let (r, l) = side.remove(i);
                        l.leave(r);
                    }
                    leaves += 1;
                } else if !away.is_empty() {
                    let r = away[rng.below(away.len() as u64) as usize];
                    for (side, key) in keys.iter().enumerate() {
                        sides[side].push((r, Ledger::join(key, r, world).expect("join")));
                    }
                }
                continue;
            }
            if sides[0].is_empty() {
                continue;
            }
            let calls: Vec<Call> = if rng.below(6) != 0 {
                lockstep_group(&mut rng, &sides[0], 12)
            } else {
                let (r, l) = &sides[0][rng.below(sides[0].len() as u64) as usize];
                vec![(
                    Arc::clone(l),
                    *r,
                    Channel::Collective,
                    any_sig(&mut rng, 12),
                )]
            };
            // The same calls on side 1's ledger (one ledger per side: one key).
            let other = Arc::clone(&sides[1][0].1);
            let mirror: Vec<Call> = calls
                .iter()
                .map(|(_, r, c, s)| (Arc::clone(&other), *r, *c, *s))
                .collect();
            let before = crate::ledger::LOCKSTEP_TAKEN.with(std::cell::Cell::get);
            let fast = record_all(calls.iter().map(|(l, r, c, s)| (&**l, *r, *c, *s)));
            let took = crate::ledger::LOCKSTEP_TAKEN.with(std::cell::Cell::get) > before;
            crate::ledger::GENERAL_ONLY.with(|g| g.set(true));
            let slow = record_all(mirror.iter().map(|(l, r, c, s)| (&**l, *r, *c, *s)));
            crate::ledger::GENERAL_ONLY.with(|g| g.set(false));
            assert_eq!(
                fast.as_ref().map_err(ToString::to_string),
                slow.as_ref().map_err(ToString::to_string),
                "round {round}: the two paths answered differently"
            );
            if took {
                taken += 1;
            } else {
                general += 1;
            }
            assert_eq!(
                sides[0][0].1.state_text(),
                other.state_text(),
                "round {round}: the two paths left different states"
            );
        }
    }
    assert!(
        taken > 2_000 && general > 2_000 && leaves > 500,
        "too few groups on one path to compare: {taken} lockstep, {general} general, {leaves} leaves"
    );
}
