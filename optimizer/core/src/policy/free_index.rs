//! The placement kit's index of nodes by free GPUs, in the cluster and per rack, as bit sets.
//!
//! A plan moves a node between counts of free GPUs for every job it places, and reads the
//! lowest-numbered node of a count (Slurm's best fit) or a rack's nodes of a count in node
//! order. Ordered sets of node positions did that with an allocation or a node shift per move
//! (about 6% of a simulated run's time went to keeping them); a bit per node and count does it
//! with a word's change and reads in the same node order.

/// The nodes with each count `f` of free GPUs (f >= 1), as bit sets over node positions in the
/// cluster and over positions within each rack, with how many there are and each rack's free
/// GPUs.
#[derive(Debug)]
pub(super) struct NodesByFree {
    /// Words of one count's set over the cluster.
    words: usize,
    /// Count `f`'s set at `f * words..`.
    all: Vec<u64>,
    /// Per count, a word before which its set has no node: [`NodesByFree::first`] starts
    /// there, so taking nodes in order does not scan the taken ones' words again.
    low: Vec<usize>,
    /// Per rack, where its sets start in `racks` and the words of one set; the rack's set of
    /// count `f` at `rack_start[r] + f * rack_words[r]..`.
    rack_start: Vec<usize>,
    rack_words: Vec<usize>,
    racks: Vec<u64>,
    /// Each node's position in its rack's node list.
    in_rack: Vec<u32>,
    /// How many nodes have `f` free GPUs: in the cluster (at `f`) and per rack (at
    /// `r * buckets + f`). Count 0 is never counted.
    counts: Vec<u32>,
    rack_counts: Vec<u32>,
    /// Free GPUs per rack.
    rack_free: Vec<u64>,
}

/// The positions of the set bits of `words`, ascending.
fn ones(words: &[u64]) -> impl Iterator<Item = usize> + '_ {
    words.iter().enumerate().flat_map(|(w, &word)| {
        let mut bits = word;
        std::iter::from_fn(move || {
            (bits != 0).then(|| {
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                w * 64 + b
            })
        })
    })
}

impl NodesByFree {
    /// The sets for counts `0..buckets` over the nodes of `rack_nodes` (each rack's nodes in
    /// node order), with `rack_of[i]` node `i`'s rack and `free[i]` its free GPUs.
    pub(super) fn new(
        free: &[u32],
        rack_of: &[usize],
        rack_nodes: &[Vec<usize>],
        buckets: usize,
    ) -> Self {
        let nodes = free.len();
        let words = nodes.div_ceil(64);
        let mut in_rack = vec![0u32; nodes];
        let mut rack_start = Vec::with_capacity(rack_nodes.len());
        let mut rack_words = Vec::with_capacity(rack_nodes.len());
        let mut rack_total = 0;
        for members in rack_nodes {
            for (position, &i) in members.iter().enumerate() {
                in_rack[i] = position as u32;
            }
            let words = members.len().div_ceil(64);
            rack_start.push(rack_total);
            rack_words.push(words);
            rack_total += buckets * words;
        }
        let mut sets = NodesByFree {
            words,
            all: vec![0; buckets * words],
            low: vec![0; buckets],
            rack_start,
            rack_words,
            racks: vec![0; rack_total],
            in_rack,
            counts: vec![0; buckets],
            rack_counts: vec![0; rack_nodes.len() * buckets],
            rack_free: vec![0; rack_nodes.len()],
        };
        for (i, &f) in free.iter().enumerate() {
            sets.move_node(i, rack_of[i], 0, f);
        }
        sets
    }

    /// Where node `i` of rack `rack` is in the rack's set of count `f`: (word, bit).
    fn rack_bit(&self, i: usize, rack: usize, f: usize) -> (usize, u64) {
        let position = self.in_rack[i] as usize;
        (
            self.rack_start[rack] + f * self.rack_words[rack] + position / 64,
            1 << (position % 64),
        )
    }

    /// Node `i`, of rack `rack`, had `old` free GPUs and now has `free`.
    pub(super) fn move_node(&mut self, i: usize, rack: usize, old: u32, free: u32) {
        let buckets = self.counts.len();
        if old > 0 {
            let f = old as usize;
            self.all[f * self.words + i / 64] &= !(1 << (i % 64));
            let (word, bit) = self.rack_bit(i, rack, f);
            self.racks[word] &= !bit;
            self.counts[f] -= 1;
            self.rack_counts[rack * buckets + f] -= 1;
        }
        if free > 0 {
            let f = free as usize;
            let word = i / 64;
            self.all[f * self.words + word] |= 1 << (i % 64);
            self.low[f] = self.low[f].min(word);
            let (word, bit) = self.rack_bit(i, rack, f);
            self.racks[word] |= bit;
            self.counts[f] += 1;
            self.rack_counts[rack * buckets + f] += 1;
        }
        self.rack_free[rack] = self.rack_free[rack] + u64::from(free) - u64::from(old);
    }

    /// How many nodes have each count of free GPUs in the cluster (by count).
    pub(super) fn counts(&self) -> &[u32] {
        &self.counts
    }

    /// How many nodes have each count of free GPUs per rack (at `r * buckets + f`).
    pub(super) fn rack_counts(&self) -> &[u32] {
        &self.rack_counts
    }

    /// Rack `rack`'s free GPUs.
    pub(super) fn rack_free(&self, rack: usize) -> u64 {
        self.rack_free[rack]
    }

    /// The first node, in node order, with `f` free GPUs. Takes `&mut self` to move the
    /// count's `low` word past the empty words it scanned.
    pub(super) fn first(&mut self, f: usize) -> Option<usize> {
        let set = &self.all[f * self.words..(f + 1) * self.words];
        let word = (self.low[f]..self.words).find(|&w| set[w] != 0);
        self.low[f] = word.unwrap_or(self.words);
        word.map(|w| w * 64 + set[w].trailing_zeros() as usize)
    }

    /// Slurm's best fit for a job of `gpus` GPUs on one node: the first node, in node order,
    /// of the fewest free GPUs that still hold it.
    pub(super) fn best_fit(&mut self, gpus: usize) -> Option<usize> {
        (gpus..self.counts.len()).find_map(|f| {
            if self.counts[f] > 0 {
                self.first(f)
            } else {
                None
            }
        })
    }

    /// The nodes of rack `rack` (its members `members`, in node order) with `f` free GPUs, in
    /// node order.
    pub(super) fn in_rack<'a>(
        &'a self,
        rack: usize,
        f: usize,
        members: &'a [usize],
    ) -> impl Iterator<Item = usize> + 'a {
        let start = self.rack_start[rack] + f * self.rack_words[rack];
        ones(&self.racks[start..start + self.rack_words[rack]]).map(move |p| members[p])
    }

    /// How many nodes have `f` free GPUs, counted from the bits.
    #[cfg(test)]
    pub(super) fn len(&self, f: usize) -> u32 {
        self.all[f * self.words..(f + 1) * self.words]
            .iter()
            .map(|w| w.count_ones())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The sets answer as ordered sets of node positions would, through any moves.
    #[test]
    fn answers_as_ordered_sets_of_nodes_through_any_moves() {
        // 150 nodes in three racks of uneven sizes (one over a word), interleaved.
        let rack_of: Vec<usize> = (0..150).map(|i| [0, 0, 1, 2, 0][i % 5]).collect();
        let mut rack_nodes = vec![Vec::new(); 3];
        for (i, &r) in rack_of.iter().enumerate() {
            rack_nodes[r].push(i);
        }
        let buckets = 9;
        // Start from every count, so `new` indexes the nodes it is given.
        let mut free: Vec<usize> = (0..150).map(|i| (i * 7) % buckets).collect();
        let start: Vec<u32> = free.iter().map(|&f| f as u32).collect();
        let mut bits = NodesByFree::new(&start, &rack_of, &rack_nodes, buckets);
        let mut sets = vec![BTreeSet::new(); buckets];
        for (i, &f) in free.iter().enumerate() {
            sets[f].insert(i);
        }
        let mut seed = 7u64;
        for step in 0..5000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let i = (seed >> 33) as usize % 150;
            let f = (seed >> 20) as usize % buckets;
            bits.move_node(i, rack_of[i], free[i] as u32, f as u32);
            sets[free[i]].remove(&i);
            sets[f].insert(i);
            free[i] = f;
            let g = 1 + step % (buckets - 1);
            assert_eq!(bits.first(g), sets[g].first().copied(), "step {step}");
            assert_eq!(bits.len(g), sets[g].len() as u32);
            assert_eq!(bits.counts()[g], sets[g].len() as u32);
            let r = step % 3;
            let in_rack: Vec<usize> = bits.in_rack(r, g, &rack_nodes[r]).collect();
            let expected: Vec<usize> = sets[g]
                .iter()
                .copied()
                .filter(|&n| rack_of[n] == r)
                .collect();
            assert_eq!(bits.rack_counts()[r * buckets + g], expected.len() as u32);
            let rack_free: usize = rack_nodes[r].iter().map(|&n| free[n]).sum();
            assert_eq!(bits.rack_free(r), rack_free as u64, "step {step}");
            assert_eq!(in_rack, expected, "step {step}");
        }
    }
}
