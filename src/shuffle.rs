//! The shuffle buffer of `tf.data`'s `shuffle`: each incoming item takes the
//! place of a uniformly drawn buffered item, which goes out.

/// SplitMix64: small, fast, and plenty for choosing buffer slots.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2^-40 for any buffer that fits in memory).
    fn below(&mut self, n: usize) -> usize {
        ((self.next() as u128 * n as u128) >> 64) as usize
    }
}

/// A seeded buffer shuffle over any items.
pub struct Shuffler<T> {
    items: Vec<T>,
    capacity: usize,
    rng: SplitMix64,
}

impl<T> Shuffler<T> {
    pub fn new(capacity: usize, seed: u64) -> Self {
        Shuffler {
            items: Vec::new(),
            capacity: capacity.max(1),
            rng: SplitMix64(seed),
        }
    }

    /// Takes `item`; once the buffer is full, gives back a drawn one.
    pub fn push(&mut self, item: T) -> Option<T> {
        if self.items.len() < self.capacity {
            self.items.push(item);
            return None;
        }
        let slot = self.rng.below(self.capacity);
        Some(std::mem::replace(&mut self.items[slot], item))
    }

    /// Empties the buffer in a uniformly random order.
    pub fn drain(&mut self) -> Vec<T> {
        let mut rest = std::mem::take(&mut self.items);
        for i in (1..rest.len()).rev() {
            let j = self.rng.below(i + 1);
            rest.swap(i, j);
        }
        rest
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_comes_out_once() {
        let mut s = Shuffler::new(100, 7);
        let mut out: Vec<u32> = (0..10_000).filter_map(|i| s.push(i)).collect();
        out.extend(s.drain());
        assert!(s.is_empty());
        assert_ne!(out[..100], (0..100).collect::<Vec<_>>()[..], "not shuffled");
        out.sort_unstable();
        assert_eq!(out, (0..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn draws_are_uniform_and_seeded() {
        let mut counts = [0u32; 10];
        let mut rng = SplitMix64(1);
        for _ in 0..100_000 {
            counts[rng.below(10)] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_500..10_500).contains(&c)),
            "{counts:?}"
        );
        let run = |seed| {
            let mut s = Shuffler::new(10, seed);
            let mut v: Vec<u32> = (0..50).filter_map(|i| s.push(i)).collect();
            v.extend(s.drain());
            v
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn an_item_stays_until_drawn() {
        // With a buffer of one, the order is kept: each item waits for the next.
        let mut s = Shuffler::new(1, 0);
        let out: Vec<u32> = (0..5).filter_map(|i| s.push(i)).collect();
        assert_eq!(out, [0, 1, 2, 3]);
        assert_eq!(s.drain(), [4]);
    }
}
