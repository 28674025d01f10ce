//! A short list kept inline, past `N` items on the heap: a [`Group`](crate::Group)'s calls and
//! its [`Launched`](crate::Launched)'s streams, with no allocation for the usual few.
//!
//! Plain fields and no `Drop` impl, so a `List<T, N>` drops as its fields do: `[Option<T>; N]`
//! and a `Vec<T>`, whose drop lets borrowed data that `T` points to die first when `T` has no
//! drop glue of its own (a group may be declared before its buffers), and both covariant in
//! `T` (`tests/group_lifetimes.rs`). No `unsafe`.

pub(crate) struct List<T, const N: usize> {
    /// The first `min(len, N)` are `Some`, the rest `None`.
    head: [Option<T>; N],
    len: usize,
    /// The items past the first `N`.
    rest: Vec<T>,
}

impl<T, const N: usize> List<T, N> {
    pub(crate) fn new() -> Self {
        List {
            head: std::array::from_fn(|_| None),
            len: 0,
            rest: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, item: T) {
        match self.head.get_mut(self.len) {
            Some(slot) => *slot = Some(item),
            None => self.rest.push(item),
        }
        self.len += 1;
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The items in the order they were pushed.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> + Clone {
        self.head[..self.len.min(N)]
            .iter()
            .flatten()
            .chain(&self.rest)
    }
}

#[cfg(test)]
mod tests {
    use super::List;

    #[test]
    fn items_come_back_in_order_inline_and_past_the_inline_ones() {
        for n in 0..12usize {
            let mut list: List<String, 4> = List::new();
            for i in 0..n {
                list.push(i.to_string());
            }
            assert_eq!(list.len(), n);
            let back: Vec<usize> = list.iter().map(|s| s.parse().unwrap()).collect();
            assert_eq!(back, (0..n).collect::<Vec<_>>());
            assert_eq!(list.iter().clone().count(), n);
        }
    }

    #[test]
    fn every_item_is_dropped_once() {
        use std::rc::Rc;
        let item = Rc::new(());
        {
            let mut list: List<Rc<()>, 2> = List::new();
            for _ in 0..5 {
                list.push(Rc::clone(&item));
            }
            assert_eq!(Rc::strong_count(&item), 6);
        }
        assert_eq!(Rc::strong_count(&item), 1);
    }
}
