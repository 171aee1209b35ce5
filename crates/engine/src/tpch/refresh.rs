//! The refresh functions' data sets (TPC-H clause 2.5).
//!
//! RF1 inserts SF * 1500 new orders (0.1% of ORDERS) with their lineitems; RF2
//! deletes SF * 1500 existing orders with their lineitems (clause 2.5.2, 2.5.3).
//!
//! How the sets are made. dbgen keys ORDERS sparsely: of each 32 consecutive
//! keys only the first 8 are used (`mk_sparse`: bits 3-4 of the key are the
//! "sequence" slot, 0 for the loaded data), and `dbgen -U` fills the unused
//! slots with the new orders of the update sets. perflab does the same with the
//! same generator: the order index range is cut into 1000 blocks of 0.1% each;
//! refresh pair n takes block b(n) of a permutation of the blocks chosen by the
//! seed, and
//! - RF1 inserts the dbgen rows of block b(n) (ORDERS and their LINEITEMs,
//!   byte-identical to dbgen's except for the key) with their keys moved into
//!   slot (g + 1) mod 4, where g = (n - 1) / 1000 is how many times all blocks
//!   have been used;
//! - RF2 deletes the orders of block b(n) in slot g mod 4: the loaded rows the
//!   first time round, then the rows an earlier RF1 inserted.
//!
//! So every pair uses fresh keys that never collide with present rows, the
//! database keeps its size, and after 4000 pairs the slots cycle. Unlike
//! `dbgen -U`, the new rows' non-key columns repeat those of the block they
//! replace rather than being drawn from further along dbgen's random streams,
//! and blocks are visited in a seed-chosen order rather than sequentially.

use std::io::Write;

use tpchgen::generators::{LineItemGenerator, OrderGenerator};

/// The order index range is cut into this many blocks of 0.1% of ORDERS.
pub const REFRESH_BLOCKS: u64 = 1000;
/// dbgen's sparse key layout: 2 bits of slot above the 3 kept low bits.
const SPARSE_KEEP_BITS: u32 = 3;
const SPARSE_SLOTS: u64 = 4;

/// Which block and which key slots refresh pair `pair` (1-based) uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshPair {
    /// 1-based block of the order index range (a `tpchgen` part of 1000).
    pub block: i32,
    /// Key slot RF1 inserts into.
    pub insert_slot: u64,
    /// Key slot RF2 deletes from.
    pub delete_slot: u64,
}

/// The block permutation: n -> (a * n + c) mod 1000 with `a` coprime to 1000,
/// both from the seed, so each of the 1000 blocks comes once per cycle.
pub fn refresh_pair(pair: u64, seed: u64) -> RefreshPair {
    assert!(pair >= 1, "refresh pairs are numbered from 1");
    let candidates: Vec<u64> = (1..REFRESH_BLOCKS)
        .filter(|a| a % 2 != 0 && a % 5 != 0)
        .collect();
    let mixed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    let a = candidates[(mixed % candidates.len() as u64) as usize];
    let c = (mixed >> 20) % REFRESH_BLOCKS;
    let n = pair - 1;
    let round = n / REFRESH_BLOCKS;
    let block = (a * (n % REFRESH_BLOCKS) + c) % REFRESH_BLOCKS;
    RefreshPair {
        block: block as i32 + 1,
        insert_slot: (round + 1) % SPARSE_SLOTS,
        delete_slot: round % SPARSE_SLOTS,
    }
}

/// An order key moved into `slot` (the key generated for slot 0 has bits 3-4 clear).
fn in_slot(order_key: i64, slot: u64) -> i64 {
    order_key | ((slot as i64) << SPARSE_KEEP_BITS)
}

/// RF1's rows as COPY text: (orders rows, lineitem rows, number of orders, number of lineitems).
pub fn rf1_rows(sf: f64, pair: RefreshPair) -> (Vec<u8>, Vec<u8>, u64, u64) {
    let parts = REFRESH_BLOCKS as i32;
    let mut orders = Vec::new();
    let mut lineitems = Vec::new();
    let (mut n_orders, mut n_lineitems) = (0u64, 0u64);
    for mut row in OrderGenerator::new(sf, pair.block, parts).iter() {
        row.o_orderkey = in_slot(row.o_orderkey, pair.insert_slot);
        write!(orders, "{row}").expect("writing to a Vec cannot fail");
        orders.pop();
        orders.push(b'\n');
        n_orders += 1;
    }
    for mut row in LineItemGenerator::new(sf, pair.block, parts).iter() {
        row.l_orderkey = in_slot(row.l_orderkey, pair.insert_slot);
        write!(lineitems, "{row}").expect("writing to a Vec cannot fail");
        lineitems.pop();
        lineitems.push(b'\n');
        n_lineitems += 1;
    }
    (orders, lineitems, n_orders, n_lineitems)
}

/// RF2's order keys.
pub fn rf2_keys(sf: f64, pair: RefreshPair) -> Vec<i64> {
    OrderGenerator::new(sf, pair.block, REFRESH_BLOCKS as i32)
        .iter()
        .map(|row| in_slot(row.o_orderkey, pair.delete_slot))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_block_once_per_round() {
        for seed in [0u64, 1, 42, 20_260_101] {
            let blocks: HashSet<i32> = (1..=REFRESH_BLOCKS)
                .map(|n| refresh_pair(n, seed).block)
                .collect();
            assert_eq!(blocks.len(), REFRESH_BLOCKS as usize);
            assert!(blocks.iter().all(|b| (1..=1000).contains(b)));
        }
    }

    #[test]
    fn slots_rotate_by_round() {
        let first = refresh_pair(1, 7);
        assert_eq!((first.insert_slot, first.delete_slot), (1, 0));
        let second_round = refresh_pair(1001, 7);
        assert_eq!(second_round.block, first.block);
        assert_eq!((second_round.insert_slot, second_round.delete_slot), (2, 1));
    }

    #[test]
    fn rf1_keys_are_new_and_rf2_keys_are_loaded() {
        let sf = 0.01;
        let loaded: HashSet<i64> = OrderGenerator::new(sf, 1, 1)
            .iter()
            .map(|o| o.o_orderkey)
            .collect();
        let pair = refresh_pair(1, 42);
        let (orders, lineitems, n_orders, n_lineitems) = rf1_rows(sf, pair);
        assert_eq!(n_orders, 15);
        assert!((15..=7 * 15).contains(&n_lineitems));
        let text = String::from_utf8(orders).unwrap();
        for line in text.lines() {
            let key: i64 = line.split('|').next().unwrap().parse().unwrap();
            assert!(!loaded.contains(&key), "RF1 key {key} is already loaded");
        }
        assert_eq!(
            String::from_utf8(lineitems).unwrap().lines().count() as u64,
            n_lineitems
        );
        let deleted = rf2_keys(sf, pair);
        assert_eq!(deleted.len(), 15);
        assert!(deleted.iter().all(|k| loaded.contains(k)));
        // the second pair touches other keys
        let other = rf2_keys(sf, refresh_pair(2, 42));
        assert!(other.iter().all(|k| !deleted.contains(k)));
    }
}
