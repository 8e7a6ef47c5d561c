//! Test-only value generator for the round-trip properties: a value of
//! every XDR type from a seed (proptest draws the seed), biased towards the
//! edges (0, 1, all ones, lengths around padding and limits).

/// xorshift64 state.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub(crate) fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
    /// Bytes of a length in `0..=max`, short lengths more likely.
    pub(crate) fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = if self.coin() {
            self.below(9) as usize
        } else {
            self.below(max as u64 + 1) as usize
        };
        (0..n.min(max)).map(|_| self.next() as u8).collect()
    }
}

/// A generated value.
pub(crate) trait Gen: Sized {
    fn gen(g: &mut Rng) -> Self;
}

impl Gen for () {
    fn gen(_: &mut Rng) -> Self {}
}

impl Gen for u32 {
    fn gen(g: &mut Rng) -> Self {
        match g.below(4) {
            0 => 0,
            1 => u32::MAX,
            2 => g.below(4096) as u32,
            _ => g.next() as u32,
        }
    }
}

impl Gen for u64 {
    fn gen(g: &mut Rng) -> Self {
        match g.below(4) {
            0 => 0,
            1 => u64::MAX,
            2 => g.below(1 << 20),
            _ => g.next(),
        }
    }
}

impl Gen for bool {
    fn gen(g: &mut Rng) -> Self {
        g.coin()
    }
}

impl Gen for [u8; 8] {
    fn gen(g: &mut Rng) -> Self {
        g.next().to_be_bytes()
    }
}

impl<T: Gen> Gen for Option<T> {
    fn gen(g: &mut Rng) -> Self {
        g.coin().then(|| T::gen(g))
    }
}

/// `Gen` for an `open_enum!` type: mostly named values, sometimes any.
macro_rules! gen_enum {
    ($($name:ty => [$($c:ident),*]),* $(,)?) => {
        $(
        impl $crate::testgen::Gen for $name {
            fn gen(g: &mut $crate::testgen::Rng) -> Self {
                let named = [$(<$name>::$c),*];
                named[g.below(named.len() as u64) as usize]
            }
        }
        )*
    };
}
pub(crate) use gen_enum;
