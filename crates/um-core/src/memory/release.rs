//! The tokens of a release to the host, which the hidden methods of `SyncGroup` pass between the
//! transitions (`crate::state`) and the sync futures (`crate::wait`).

use crate::driver::stream::RawStream;

/// Where a buffer stays associated once it is back on the host (what the storage's release
/// says).
pub struct Released(pub(crate) RawStream);

/// Proof that a stream has run past the releases of a group, with where each buffer stays
/// associated. Only a sync future makes one, once its completion reported success; the hidden
/// `SyncGroup::host_group` takes it, so no other code can retype buffers to the host.
pub struct Passed {
    after: Vec<Released>,
}

impl Passed {
    /// Only for a sync future whose stream reported success after the releases.
    pub(crate) fn new(after: Vec<Released>) -> Self {
        Passed { after }
    }

    pub(crate) fn into_after(self) -> std::vec::IntoIter<Released> {
        self.after.into_iter()
    }
}
