//! The size and rank rules of each collective, checked on plain numbers before anything is
//! enqueued: NCCL takes one count and trusts every buffer to hold what that count implies.

use um_core::{Error, Result};

/// What NCCL is told: the count it takes (`count`, `sendcount` or `recvcount`).
pub(crate) type Count = usize;

/// All-reduce, broadcast, reduce: input and output hold the same number of elements.
pub(crate) fn same_len(collective: &'static str, input: usize, output: usize) -> Result<Count> {
    if input == output {
        Ok(input)
    } else {
        Err(Error::CollectiveSize {
            collective,
            detail: format!(
                "the input holds {input} elements and the output {output}: they must hold the same number"
            ),
        })
    }
}

/// All-gather: the output holds `world_size` times the input (`sendcount` = input).
pub(crate) fn all_gather(input: usize, output: usize, world_size: usize) -> Result<Count> {
    match input.checked_mul(world_size) {
        Some(need) if need == output => Ok(input),
        need => Err(Error::CollectiveSize {
            collective: "all_gather",
            detail: format!(
                "the output holds {output} elements and the input {input}: the output must hold \
                 world size ({world_size}) times the input ({})",
                need.map_or_else(|| "more than usize holds".to_owned(), |n| n.to_string())
            ),
        }),
    }
}

/// Reduce-scatter: the input holds `world_size` times the output (`recvcount` = output).
pub(crate) fn reduce_scatter(input: usize, output: usize, world_size: usize) -> Result<Count> {
    match output.checked_mul(world_size) {
        Some(need) if need == input => Ok(output),
        need => Err(Error::CollectiveSize {
            collective: "reduce_scatter",
            detail: format!(
                "the input holds {input} elements and the output {output}: the input must hold \
                 world size ({world_size}) times the output ({})",
                need.map_or_else(|| "more than usize holds".to_owned(), |n| n.to_string())
            ),
        }),
    }
}

/// A root (broadcast, reduce): a rank of the communicator.
pub(crate) fn root(
    collective: &'static str,
    root: usize,
    own: usize,
    world_size: usize,
) -> Result<i32> {
    rank_in_range(collective, "root", root, own, world_size)
}

/// A peer (send, recv): a rank of the communicator, and not the caller's own unless the call is
/// part of a group (where the matching call to itself can be too).
pub(crate) fn peer(
    collective: &'static str,
    peer: usize,
    own: usize,
    world_size: usize,
    in_group: bool,
) -> Result<i32> {
    let raw = rank_in_range(collective, "peer", peer, own, world_size)?;
    if peer == own && !in_group {
        return Err(Error::InvalidRank {
            collective,
            what: "peer",
            rank: peer,
            world_size,
            own,
            reason: "is the calling rank: a send to itself needs its receive in the same group (use a Group)",
        });
    }
    Ok(raw)
}

fn rank_in_range(
    collective: &'static str,
    what: &'static str,
    rank: usize,
    own: usize,
    world_size: usize,
) -> Result<i32> {
    match i32::try_from(rank) {
        Ok(raw) if rank < world_size => Ok(raw),
        _ => Err(Error::InvalidRank {
            collective,
            what,
            rank,
            world_size,
            own,
            reason: "is not a rank of the communicator",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_gather_needs_world_size_times_the_input() {
        assert_eq!(all_gather(4, 16, 4).ok(), Some(4));
        for (input, output) in [(4, 15), (4, 17), (4, 4), (16, 4)] {
            let err = all_gather(input, output, 4).expect_err("wrong sizes");
            assert!(matches!(
                err,
                Error::CollectiveSize {
                    collective: "all_gather",
                    ..
                }
            ));
            assert!(
                err.to_string().contains("world size (4) times the input"),
                "{err}"
            );
        }
        // A product that overflows is refused, not wrapped into a small "match".
        let err = all_gather(usize::MAX / 2 + 1, 0, 2).expect_err("overflow");
        assert!(err.to_string().contains("more than usize holds"), "{err}");
    }

    #[test]
    fn reduce_scatter_needs_world_size_times_the_output() {
        assert_eq!(reduce_scatter(12, 3, 4).ok(), Some(3));
        for (input, output) in [(12, 4), (11, 3), (3, 12)] {
            let err = reduce_scatter(input, output, 4).expect_err("wrong sizes");
            assert!(
                err.to_string().contains("world size (4) times the output"),
                "{err}"
            );
        }
        assert!(reduce_scatter(0, usize::MAX, 3).is_err());
    }

    #[test]
    fn same_length_collectives_refuse_any_difference() {
        assert_eq!(same_len("all_reduce", 7, 7).ok(), Some(7));
        assert!(same_len("all_reduce", 7, 8).is_err());
        assert!(same_len("broadcast", 8, 7).is_err());
    }

    #[test]
    fn roots_and_peers_are_ranks_of_the_communicator() {
        assert_eq!(root("broadcast", 3, 0, 4).ok(), Some(3));
        assert!(root("broadcast", 4, 0, 4).is_err());
        assert!(root("reduce", usize::MAX, 0, 4).is_err());
        assert_eq!(peer("send", 1, 0, 2, false).ok(), Some(1));
        assert!(peer("send", 2, 0, 2, false).is_err());
        let own = peer("recv", 1, 1, 2, false).expect_err("itself, outside a group");
        assert!(own.to_string().contains("is the calling rank"), "{own}");
        assert_eq!(peer("recv", 1, 1, 2, true).ok(), Some(1));
    }
}
