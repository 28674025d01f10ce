//! A CSR matrix whose structure is proved while the CPU owns it, and that moves to a stream as
//! one unit.

use um_core::{
    Attachable, Coherent, Context, HostOwned, HostVisible, Managed, Mirror, State, Storage, Stream,
    StreamOwned, Unified,
};

use crate::element::Element;
use crate::error::{Error, Result};

/// A sparse matrix in CSR form (compressed sparse rows, 32-bit indices, zero-based), as three
/// buffers that change owner together: `S` is [`HostOwned`] or a stream's
/// [`StreamOwned`].
///
/// **The structure is a proof.** [`Csr::new`] checks, before anything reaches the GPU, that
/// `row_offsets` has `rows + 1` entries, starts at 0, never decreases and ends at the number of
/// stored entries (the length of `col_indices` and of `values`), and that within each row the
/// column indices are below `cols` and strictly increasing. Afterwards the structure cannot
/// change: the offsets and indices are only readable ([`Csr::row_offsets`],
/// [`Csr::col_indices`]); the values may be rewritten in place ([`Csr::values_mut`]), which
/// moves no entry. So every index cuSPARSE follows lands inside the buffers.
///
/// **One unit.** [`attach`](Csr::attach) hands all three buffers to one stream, and
/// [`sync`](Csr::sync) gives all three back: no part can be on the CPU while another is on the
/// device, or on another stream.
pub struct Csr<T: Element, S: State = HostOwned, M: Storage = Unified> {
    rows: usize,
    cols: usize,
    row_offsets: Managed<[i32], S, M>,
    col_indices: Managed<[i32], S, M>,
    values: Managed<[T], S, M>,
}

/// The largest dimension or entry count: cuSPARSE's 32-bit indices.
const MAX: usize = i32::MAX as usize;

/// Checks a CSR structure: why not, if it is not one.
pub(crate) fn check_structure(
    rows: usize,
    cols: usize,
    row_offsets: &[i32],
    col_indices: &[i32],
    values: usize,
) -> std::result::Result<(), String> {
    let nnz = col_indices.len();
    if rows == 0 || cols == 0 {
        return Err(format!(
            "a {rows}x{cols} matrix: both dimensions must be at least 1"
        ));
    }
    if rows > MAX || cols > MAX || nnz > MAX {
        return Err(format!(
            "a {rows}x{cols} matrix with {nnz} entries does not fit 32-bit indices (at most {MAX})"
        ));
    }
    if nnz == 0 {
        return Err(
            "no stored entry: um allocates no empty buffer (store one explicit zero)".to_owned(),
        );
    }
    if values != nnz {
        return Err(format!("{nnz} column indices but {values} values"));
    }
    if row_offsets.len() != rows + 1 {
        return Err(format!(
            "{} row offsets for {rows} rows: there must be rows + 1 = {}",
            row_offsets.len(),
            rows + 1
        ));
    }
    if row_offsets[0] != 0 {
        return Err(format!(
            "the row offsets start at {}, not 0",
            row_offsets[0]
        ));
    }
    for r in 0..rows {
        let (start, end) = (row_offsets[r], row_offsets[r + 1]);
        if end < start {
            return Err(format!(
                "row {r} ends at {end}, before it starts at {start}"
            ));
        }
        // Within 0..=nnz: `start` is 0 or an earlier row's end, checked here.
        let (start, end) = (start as usize, end as usize);
        if end > nnz {
            return Err(format!(
                "row {r} ends at {end}, past the {nnz} stored entries"
            ));
        }
        let mut previous: Option<i32> = None;
        for (k, &c) in col_indices[start..end].iter().enumerate() {
            if c < 0 || c as usize >= cols {
                return Err(format!(
                    "entry {} (row {r}) has column {c}, outside 0..{cols}",
                    start + k
                ));
            }
            if previous.is_some_and(|p| c <= p) {
                return Err(format!(
                    "row {r}: column {c} at entry {} does not come after column {}",
                    start + k,
                    previous.unwrap_or_default()
                ));
            }
            previous = Some(c);
        }
    }
    if row_offsets[rows] as usize != nnz {
        return Err(format!(
            "the last row ends at {}, but {nnz} entries are stored",
            row_offsets[rows]
        ));
    }
    Ok(())
}

impl<T: Element> Csr<T, HostOwned> {
    /// A `rows`×`cols` matrix from its CSR arrays, copied into managed memory of `ctx` once
    /// the structure is proved (see [`Csr`]); [`Error::Structure`], saying what is wrong, if it
    /// is not one.
    pub fn new(
        ctx: &Context,
        rows: usize,
        cols: usize,
        row_offsets: &[i32],
        col_indices: &[i32],
        values: &[T],
    ) -> Result<Self> {
        Csr::build(
            ctx,
            (rows, cols),
            (row_offsets, col_indices, values),
            Alloc {
                ints: Managed::from_slice,
                values: Managed::from_slice,
            },
        )
    }
}

impl<T: Element> Csr<T, HostOwned, Coherent> {
    /// [`Csr::new`] in coherent managed memory ([`Coherent`]: attached globally, so no
    /// transition makes an association call; devices with concurrent managed access only).
    /// Where a loop synchronizes its stream often (a solver reading a dot product on the host
    /// every iteration), memory associated with the stream makes each synchronization cost
    /// time in proportion to its size; coherent memory does not (`docs/performance.md`,
    /// section 11).
    pub fn new_coherent(
        ctx: &Context,
        rows: usize,
        cols: usize,
        row_offsets: &[i32],
        col_indices: &[i32],
        values: &[T],
    ) -> Result<Self> {
        Csr::build(
            ctx,
            (rows, cols),
            (row_offsets, col_indices, values),
            Alloc {
                ints: Managed::from_slice_coherent,
                values: Managed::from_slice_coherent,
            },
        )
    }
}

impl<T: Element> Csr<T, HostOwned, Mirror> {
    /// [`Csr::new`] in mirrored memory ([`Mirror`]: device memory that kernels use, and a
    /// page-locked host copy that `sync` refreshes only where a kernel wrote, which a product
    /// never does to its matrix).
    pub fn new_mirrored(
        ctx: &Context,
        rows: usize,
        cols: usize,
        row_offsets: &[i32],
        col_indices: &[i32],
        values: &[T],
    ) -> Result<Self> {
        Csr::build(
            ctx,
            (rows, cols),
            (row_offsets, col_indices, values),
            Alloc {
                ints: Managed::from_slice_mirrored,
                values: Managed::from_slice_mirrored,
            },
        )
    }
}

/// A storage's constructor of a host-owned buffer from a slice.
type FromSlice<E, M> = fn(&Context, &[E]) -> um_core::Result<Managed<[E], HostOwned, M>>;

/// How a storage allocates the three parts of a matrix from slices.
struct Alloc<T: Element, M: Storage> {
    ints: FromSlice<i32, M>,
    values: FromSlice<T, M>,
}

impl<T: Element, M: Storage> Csr<T, HostOwned, M> {
    /// The structure checked first ([`check_structure`]), then the three parts allocated.
    fn build(
        ctx: &Context,
        (rows, cols): (usize, usize),
        (row_offsets, col_indices, values): (&[i32], &[i32], &[T]),
        alloc: Alloc<T, M>,
    ) -> Result<Self> {
        check_structure(rows, cols, row_offsets, col_indices, values.len())
            .map_err(Error::Structure)?;
        Ok(Csr {
            rows,
            cols,
            row_offsets: (alloc.ints)(ctx, row_offsets)?,
            col_indices: (alloc.ints)(ctx, col_indices)?,
            values: (alloc.values)(ctx, values)?,
        })
    }

    /// Hands the whole matrix to `stream`. If one part's attach fails, the parts are dropped as
    /// their owners' (each freed after its stream's work) and the error returned.
    pub fn attach<'s, K: Attachable>(
        self,
        stream: &Stream<'s, K>,
    ) -> Result<Csr<T, StreamOwned<'s, K>, M>> {
        let Csr {
            rows,
            cols,
            row_offsets,
            col_indices,
            values,
        } = self;
        Ok(Csr {
            rows,
            cols,
            row_offsets: row_offsets.attach(stream)?,
            col_indices: col_indices.attach(stream)?,
            values: values.attach(stream)?,
        })
    }
}

impl<T: Element, M: HostVisible> Csr<T, HostOwned, M> {
    /// The row offsets (`rows + 1`), read-only: the structure is proved.
    pub fn row_offsets(&self) -> &[i32] {
        &self.row_offsets
    }

    /// The column indices, read-only.
    pub fn col_indices(&self) -> &[i32] {
        &self.col_indices
    }

    /// The stored values.
    pub fn values(&self) -> &[T] {
        &self.values
    }

    /// The stored values, to rewrite in place (the structure stays as proved).
    pub fn values_mut(&mut self) -> &mut [T] {
        &mut self.values
    }
}

impl<'s, T: Element, K: Attachable, M: Storage> Csr<T, StreamOwned<'s, K>, M> {
    /// Waits for the owning stream and gives the whole matrix back to the CPU. If a part's
    /// `sync` fails, the parts are dropped and the error returned.
    pub fn sync(self) -> Result<Csr<T, HostOwned, M>> {
        let Csr {
            rows,
            cols,
            row_offsets,
            col_indices,
            values,
        } = self;
        Ok(Csr {
            rows,
            cols,
            row_offsets: row_offsets.sync()?,
            col_indices: col_indices.sync()?,
            values: values.sync()?,
        })
    }

    /// Whether `stream` owns the matrix (all three parts move together, so one tells).
    pub(crate) fn is_owned_by(&self, stream: &Stream<'s, K>) -> bool {
        stream.owns(&self.values)
            && stream.owns(&self.row_offsets)
            && stream.owns(&self.col_indices)
    }

    /// The device addresses of the row offsets, column indices and values, for a call that
    /// only reads them, on the owning stream.
    pub(crate) fn device_parts(&self) -> (*const i32, *const i32, *const T) {
        (
            self.row_offsets.as_device_ptr().as_ptr(),
            self.col_indices.as_device_ptr().as_ptr(),
            self.values.as_device_ptr().as_ptr(),
        )
    }
}

impl<T: Element, S: State, M: Storage> Csr<T, S, M> {
    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Stored entries.
    pub fn nnz(&self) -> usize {
        self.values.len()
    }
}

impl<T: Element, S: State, M: Storage> std::fmt::Debug for Csr<T, S, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Csr")
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("nnz", &self.values.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::check_structure;

    #[test]
    fn a_proper_csr_structure_is_accepted() {
        // [[1, 0, 2], [0, 0, 0], [0, 3, 0]]
        assert_eq!(check_structure(3, 3, &[0, 2, 2, 3], &[0, 2, 1], 3), Ok(()));
    }

    #[test]
    fn every_broken_structure_is_refused_with_its_reason() {
        // rows, cols, offsets, indices, values, what the error says.
        type Case = (
            usize,
            usize,
            &'static [i32],
            &'static [i32],
            usize,
            &'static str,
        );
        let cases: [Case; 11] = [
            (0, 3, &[0], &[], 0, "both dimensions"),
            (2, 2, &[0, 1, 2], &[0, 1], 1, "but 1 values"),
            (2, 2, &[0, 1], &[0], 1, "rows + 1"),
            (2, 2, &[1, 1, 1], &[0], 1, "start at 1"),
            (2, 2, &[0, 2, 1], &[0, 1], 2, "before it starts"),
            (2, 2, &[0, 1, 3], &[0, 1], 2, "past the 2 stored entries"),
            (2, 2, &[0, 1, 1], &[0, 1], 2, "last row ends at 1"),
            (2, 2, &[0, 1, 2], &[0, 2], 2, "outside 0..2"),
            (2, 2, &[0, 1, 2], &[0, -1], 2, "outside 0..2"),
            (1, 3, &[0, 2], &[2, 1], 2, "does not come after"),
            (1, 3, &[0, 2], &[1, 1], 2, "does not come after"),
        ];
        for (rows, cols, offsets, indices, values, why) in cases {
            let got = check_structure(rows, cols, offsets, indices, values);
            assert!(
                matches!(&got, Err(e) if e.contains(why)),
                "{rows}x{cols} {offsets:?} {indices:?}: {got:?}, expected {why:?}"
            );
        }
        assert!(
            check_structure(1, 1, &[0, 0], &[], 0).is_err_and(|e| e.contains("no stored entry"))
        );
        let big = i32::MAX as usize + 1;
        assert!(check_structure(big, 1, &[0], &[0], 1).is_err_and(|e| e.contains("32-bit")));
    }

    #[test]
    fn offsets_and_columns_at_the_ends_of_i32_are_refused_without_overflow() {
        let (max, min) = (i32::MAX, i32::MIN);
        // rows, cols, offsets, indices: each refused, none panics.
        let cases: [(usize, usize, &[i32], &[i32]); 7] = [
            (2, 3, &[0, max, 1], &[0]),
            (2, 3, &[0, min, 1], &[0]),
            (2, 3, &[0, 1, max], &[0]),
            (1, 3, &[0, 1], &[3]),
            (1, 3, &[0, 1], &[max]),
            (1, 3, &[0, 1], &[min]),
            (3, 3, &[0, 2, 1, 2], &[0, 1]),
        ];
        for (rows, cols, offsets, indices) in cases {
            let got = check_structure(rows, cols, offsets, indices, indices.len());
            assert!(
                got.is_err(),
                "{rows}x{cols} {offsets:?} {indices:?} accepted"
            );
        }
        // A column index equal to the last one allowed is fine.
        assert_eq!(check_structure(1, 3, &[0, 1], &[2], 1), Ok(()));
    }
}
