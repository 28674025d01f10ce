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

fn id(seed: u64, which: usize) -> [u8; UNIQUE_ID_BYTES] {
    let mut id = [0u8; UNIQUE_ID_BYTES];
    id[0] = 0x6d;
    id[1] = which as u8;
    id[8..16].copy_from_slice(&seed.to_le_bytes());
    id
}

/// `rounds` fresh pairs of ledgers (world sizes 2 to 9, some ranks remote), 200 groups of 1 to
/// 6 calls each over both; one call in `odd` has another count or kind.
fn run(seed: u64, rounds: u64, odd: u64) -> (u64, u64) {
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
            for _ in 0..1 + rng.below(6) {
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
                let sig = Sig {
                    kind: if rng.below(odd) == 0 {
                        "broadcast"
                    } else {
                        "all_reduce"
                    },
                    dtype: "ncclFloat32",
                    count: 10 + usize::from(rng.below(odd) == 0),
                    op: Some(0),
                    root: None,
                };
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
        let (accepted, refused) = run(seed, 150, odd);
        assert!(
            accepted > 3_000 && refused > 3_000,
            "too few of one answer to test anything: {accepted} accepted, {refused} refused"
        );
    }
}
