// Three frames deep in a loop (no black_box: Debian 12's rustc 1.63 has none; a volatile read
// keeps the work).
use std::ptr::read_volatile;

#[inline(never)]
fn leaf(n: u64) -> u64 {
    let mut s = 0u64;
    for i in 0..n {
        s = s.wrapping_add(unsafe { read_volatile(&i) } * i % 7);
    }
    s
}
#[inline(never)]
fn middle(n: u64) -> u64 { leaf(n) + 1 }
#[inline(never)]
fn outer(n: u64) -> u64 { middle(n) + 1 }

fn main() {
    let rounds: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1 << 40);
    let mut t = 0u64;
    for r in 0..rounds {
        t = t.wrapping_add(outer(100000 + unsafe { read_volatile(&r) } % 2));
    }
    println!("{}", t);
}
