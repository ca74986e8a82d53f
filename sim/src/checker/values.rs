//! [`ValueMap`]: what the checkers know of each value, in slots (and the values a workload's
//! producer has not seen acknowledged yet).
//!
//! A value is a producer process and a sequence within it, both counters from zero or one, so
//! a slot per `(process, sequence)` replaces a tree walk per lookup (a history has a send and a
//! completion per value and a poll per record, judged once per seed). Keys past the slots'
//! bounds (a hand-written or hostile history) go to a tree instead, so no history can make the
//! slots large. Iteration is in [`Value`] order, as a `BTreeMap<Value, T>` would give it.

use std::collections::BTreeMap;

use crate::history::Value;

/// Processes with slots: a run has a few dozen.
const SLOTTED_PROCESSES: u64 = 1 << 12;
/// Sequences with slots, per process: a run's producer sends up to a few hundred thousand.
const SLOTTED_SEQUENCES: u64 = 1 << 20;

/// A map from [`Value`] to `T`.
#[derive(Debug, Clone)]
pub(crate) struct ValueMap<T> {
    /// `slots[process][sequence]`, for keys within the bounds above.
    slots: Vec<Vec<Option<T>>>,
    /// Keys beyond them.
    others: BTreeMap<Value, T>,
    len: usize,
}

impl<T> Default for ValueMap<T> {
    fn default() -> Self {
        ValueMap {
            slots: Vec::new(),
            others: BTreeMap::new(),
            len: 0,
        }
    }
}

fn slotted(value: Value) -> bool {
    value.process < SLOTTED_PROCESSES && value.sequence < SLOTTED_SEQUENCES
}

impl<T> ValueMap<T> {
    /// Puts `item` at `value`, returning what was there.
    pub(crate) fn insert(&mut self, value: Value, item: T) -> Option<T> {
        let previous = if slotted(value) {
            let (process, sequence) = (value.process as usize, value.sequence as usize);
            if self.slots.len() <= process {
                self.slots.resize_with(process + 1, Vec::new);
            }
            let row = &mut self.slots[process];
            if row.len() <= sequence {
                row.resize_with(sequence + 1, || None);
            }
            row[sequence].replace(item)
        } else {
            self.others.insert(value, item)
        };
        if previous.is_none() {
            self.len += 1;
        }
        previous
    }

    /// Takes what is at `value` out.
    #[cfg_attr(not(madsim), allow(dead_code))] // the workload's, which runs under madsim only
    pub(crate) fn remove(&mut self, value: &Value) -> Option<T> {
        let removed = if slotted(*value) {
            self.slots
                .get_mut(value.process as usize)?
                .get_mut(value.sequence as usize)?
                .take()
        } else {
            self.others.remove(value)
        };
        if removed.is_some() {
            self.len -= 1;
        }
        removed
    }

    /// What is at `value`.
    pub(crate) fn get(&self, value: &Value) -> Option<&T> {
        if slotted(*value) {
            self.slots
                .get(value.process as usize)?
                .get(value.sequence as usize)?
                .as_ref()
        } else {
            self.others.get(value)
        }
    }

    /// What is at `value`, to change.
    pub(crate) fn get_mut(&mut self, value: &Value) -> Option<&mut T> {
        if slotted(*value) {
            self.slots
                .get_mut(value.process as usize)?
                .get_mut(value.sequence as usize)?
                .as_mut()
        } else {
            self.others.get_mut(value)
        }
    }

    /// Whether anything is at `value`.
    pub(crate) fn contains(&self, value: &Value) -> bool {
        self.get(value).is_some()
    }

    /// How many values are present.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Every `(value, item)` in [`Value`] order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Value, &T)> {
        let mut slotted = self.slots.iter().enumerate().flat_map(|(process, row)| {
            row.iter().enumerate().filter_map(move |(sequence, item)| {
                let value = Value {
                    process: process as u64,
                    sequence: sequence as u64,
                };
                item.as_ref().map(|item| (value, item))
            })
        });
        let mut others = self.others.iter().map(|(value, item)| (*value, item));
        let (mut next_slotted, mut next_other) = (slotted.next(), others.next());
        std::iter::from_fn(move || match (next_slotted, next_other) {
            (Some(a), Some(b)) if b.0 < a.0 => {
                next_other = others.next();
                Some(b)
            }
            (Some(a), _) => {
                next_slotted = slotted.next();
                Some(a)
            }
            (None, Some(b)) => {
                next_other = others.next();
                Some(b)
            }
            (None, None) => None,
        })
    }

    /// Every item, in [`Value`] order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.iter().map(|(_, item)| item)
    }
}

/// A set of [`Value`]s.
pub(crate) type ValueSet = ValueMap<()>;

#[cfg(test)]
mod tests {
    use super::*;

    fn value(process: u64, sequence: u64) -> Value {
        Value { process, sequence }
    }

    /// The same operations on a `ValueMap` and a `BTreeMap` give the same answers and the same
    /// iteration, slotted keys and keys past the slots' bounds mixed.
    #[test]
    fn behaves_as_a_btree_map() {
        let keys = [
            value(3, 7),
            value(0, 1),
            value(SLOTTED_PROCESSES + 5, 2),
            value(3, SLOTTED_SEQUENCES + 1),
            value(3, 1),
            value(1, 0),
            value(3, 7),
            value(u64::MAX, u64::MAX),
            value(2, 4),
        ];
        let mut map = ValueMap::default();
        let mut model = BTreeMap::new();
        for (item, key) in keys.iter().enumerate() {
            assert_eq!(map.insert(*key, item), model.insert(*key, item));
            assert_eq!(map.len(), model.len());
        }
        let iterated: Vec<(Value, usize)> = map.iter().map(|(key, item)| (key, *item)).collect();
        let expected: Vec<(Value, usize)> = model.iter().map(|(key, item)| (*key, *item)).collect();
        assert_eq!(iterated, expected);
        assert_eq!(
            map.values().copied().collect::<Vec<_>>(),
            model.values().copied().collect::<Vec<_>>()
        );
        for key in keys
            .iter()
            .chain(&[value(3, 2), value(9, 9), value(SLOTTED_PROCESSES, 0)])
        {
            assert_eq!(map.get(key), model.get(key));
            assert_eq!(map.contains(key), model.contains_key(key));
        }
        *map.get_mut(&value(0, 1)).expect("present") = 100;
        assert_eq!(map.get(&value(0, 1)), Some(&100));
        assert_eq!(map.get_mut(&value(0, 2)), None);
        *map.get_mut(&value(u64::MAX, u64::MAX)).expect("present") = 200;
        assert_eq!(map.get(&value(u64::MAX, u64::MAX)), Some(&200));
        model.insert(value(0, 1), 100);
        model.insert(value(u64::MAX, u64::MAX), 200);
        for key in [
            value(3, 7),
            value(3, 7),
            value(SLOTTED_PROCESSES + 5, 2),
            value(9, 9),
            value(3, 100),
            value(SLOTTED_PROCESSES, 0),
        ] {
            assert_eq!(map.remove(&key), model.remove(&key));
            assert_eq!(map.len(), model.len());
        }
        let iterated: Vec<(Value, usize)> = map.iter().map(|(key, item)| (key, *item)).collect();
        let expected: Vec<(Value, usize)> = model.iter().map(|(key, item)| (*key, *item)).collect();
        assert_eq!(iterated, expected, "after removals");
    }
}
