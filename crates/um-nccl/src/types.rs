//! The types a collective takes: its element types, its reductions, the streams it may run on,
//! and NCCL's unique id.

use um_core::{Created, DeviceCopy, Eager, Foreign, Legacy, Result};

use crate::sealed::Sealed;
use crate::sys::{self, RawUniqueId, UNIQUE_ID_BYTES};

/// An element type NCCL moves and reduces (`ncclDataType_t`). Sealed: a buffer of any other
/// type is a compile error.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an element type of NCCL's collectives",
    label = "NCCL has no `ncclDataType_t` for this type",
    note = "NCCL's types are i8, u8, i32, u32, i64, u64, f32 and f64 (ncclInt8 .. ncclFloat64)",
    note = "move other data as bytes: a buffer of `u8` of the same size"
)]
pub trait Element: Sealed + DeviceCopy + 'static {
    /// The `ncclDataType_t` value.
    #[doc(hidden)]
    const DATATYPE: i32;
    /// The C name, for messages.
    #[doc(hidden)]
    const NAME: &'static str;
}

macro_rules! elements {
    ($($t:ty => $v:expr, $n:expr;)*) => {$(
        impl Sealed for $t {}
        impl Element for $t {
            const DATATYPE: i32 = $v;
            const NAME: &'static str = $n;
        }
    )*};
}

elements! {
    i8 => 0, "ncclInt8";
    u8 => 1, "ncclUint8";
    i32 => 2, "ncclInt32";
    u32 => 3, "ncclUint32";
    i64 => 4, "ncclInt64";
    u64 => 5, "ncclUint64";
    f32 => 7, "ncclFloat32";
    f64 => 8, "ncclFloat64";
}

/// The reduction of a reducing collective (`ncclRedOp_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `ncclSum`.
    Sum,
    /// `ncclProd`.
    Prod,
    /// `ncclMax`.
    Max,
    /// `ncclMin`.
    Min,
    /// `ncclAvg`: the sum divided by the number of ranks.
    Avg,
}

impl ReduceOp {
    pub(crate) fn raw(self) -> i32 {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Prod => 1,
            ReduceOp::Max => 2,
            ReduceOp::Min => 3,
            ReduceOp::Avg => 4,
        }
    }
}

/// The stream kinds a collective may run on: [`Created`], [`Foreign`] and [`Legacy`]. Sealed.
///
/// Not the per-thread default stream: its handle (`CU_STREAM_PER_THREAD`) names another stream on
/// every thread, and a nonblocking communicator enqueues from a thread of NCCL's own, where it
/// would name a stream the buffers do not belong to.
#[diagnostic::on_unimplemented(
    message = "an NCCL collective cannot run on a `{Self}` stream",
    label = "not a stream a collective may be enqueued on",
    note = "the per-thread default stream (`PerThread`): its handle names another stream on every thread, and NCCL enqueues from threads of its own",
    note = "a graph's capture stream (`Capture`): um-nccl does not record collectives into graphs (a captured collective would run at every replay, with no agreement check, no bounded wait and no abort)",
    note = "run collectives on a stream of your own (`Context::with_stream`), a foreign stream or the legacy stream"
)]
pub trait CollectiveStream: Eager {}
impl CollectiveStream for Created {}
impl CollectiveStream for Foreign {}
impl CollectiveStream for Legacy {}

/// NCCL's unique id (`ncclUniqueId`, 128 bytes): made once by one rank
/// ([`UniqueId::new`]), given to every rank ([`Bootstrap`](crate::Bootstrap) sends it over
/// TCP), and passed to [`Comm::init_rank`](crate::Comm::init_rank) by each.
///
/// It is data: bytes from anywhere make a `UniqueId`, and bytes that are not one make the
/// communicator's creation fail (or time out), never undefined behaviour.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId([u8; UNIQUE_ID_BYTES]);

impl UniqueId {
    /// A fresh id from NCCL (`ncclGetUniqueId`). It names a bootstrap endpoint in this process:
    /// make it on the rank that should host it (rank 0), once per communicator.
    pub fn new() -> Result<UniqueId> {
        let nccl = sys::nccl()?; // refuses inside um's stream callback, before any NCCL call
        let raw = crate::result::get_unique_id(nccl)?;
        Ok(UniqueId(raw.internal.map(|c| c as u8)))
    }

    /// The id of these bytes (received from the rank that made it).
    pub fn from_bytes(bytes: [u8; UNIQUE_ID_BYTES]) -> UniqueId {
        UniqueId(bytes)
    }

    /// The 128 bytes, to send to the other ranks.
    pub fn as_bytes(&self) -> &[u8; UNIQUE_ID_BYTES] {
        &self.0
    }

    pub(crate) fn raw(&self) -> RawUniqueId {
        RawUniqueId {
            internal: self.0.map(|b| b as std::ffi::c_char),
        }
    }
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A short fingerprint: the id is a bootstrap address and a magic, not for logs.
        let hash = self.0.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
        });
        write!(f, "UniqueId({hash:016x})")
    }
}
