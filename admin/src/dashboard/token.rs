//! What `ADMIN_TOKEN` must be. The login form and the admin API are all that stands
//! between the network and the registry, so a token that is short or that a person made
//! up with too little variety (`aaaa…`, `abcdabcd…`, `0123456789…`) is refused at startup.
//!
//! The rules, for a token of n characters:
//!
//! 1. at least [`MIN_LEN`] (32) characters: 32 hex digits are 128 bits;
//! 2. at least [`MIN_DISTINCT`] (7) different characters;
//! 3. not a shorter pattern repeated: for no shift p ≤ n/2 do the token and itself
//!    shifted by p agree in all but an eighth of the n − p places (this also covers one
//!    character repeated, and a pattern repeated with a few characters changed);
//! 4. no run of [`MAX_RUN`] (11) characters that step by the same amount, −1, 0 or +1
//!    (`aaaaaaaaaaa`, `abcdefghijk`, `kjihgfedcba`).
//!
//! **Random tokens pass.** For a token of 32 random hex digits (`openssl rand -hex 16`),
//! the chance of a refusal is below 2.1e-10, one in five billion (computed exactly, rule
//! by rule, in the tests, and summed):
//!
//! - rule 2: six or fewer of the 16 digits in 32 draws, 1.84e-10 (the number of strings
//!   over k ≤ 6 digits, by inclusion–exclusion, over 16^32). Seven is therefore the most
//!   this rule can ask: eight distinct would refuse 3.5e-8 of random tokens;
//! - rule 3: for each shift p the n − p agreements are independent, each of chance 1/16,
//!   so a binomial tail; summed over p ≤ 16, 1.6e-15;
//! - rule 4: hex digits have no 11 consecutive code points (0–9 are 10, a–f 6), so only
//!   a digit repeated 11 times counts: 22 places × 16 / 16^11, 2.0e-11.
//!
//! For 64 hex digits (`openssl rand -hex 32`) it is below 5e-11.

/// Fewest characters: 32 hex digits are 128 bits.
pub const MIN_LEN: usize = 32;
/// Fewest different characters; see the module's text for why not more.
pub const MIN_DISTINCT: usize = 7;
/// The shortest run (equal or consecutive characters) that is refused.
pub const MAX_RUN: usize = 11;

/// How to make a token that passes, said by every refusal.
const HOW: &str = "make a random one with `openssl rand -hex 32`";

/// `Ok` when `token` may be `ADMIN_TOKEN`; else why not, as a sentence that never quotes
/// the token itself (it may be a real secret with a flaw).
pub fn check(token: &str) -> Result<(), String> {
    let chars: Vec<char> = token.chars().collect();
    let n = chars.len();
    if n < MIN_LEN {
        return Err(format!(
            "ADMIN_TOKEN is too short ({n} characters): use at least {MIN_LEN}, e.g. `openssl rand -hex 32`"
        ));
    }
    let mut distinct = chars.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < MIN_DISTINCT {
        let uses = match distinct.len() {
            1 => "is one character repeated".to_string(),
            k => format!("uses only {k} different characters"),
        };
        return Err(format!(
            "ADMIN_TOKEN has too little variety: it {uses}, and needs at least {MIN_DISTINCT} different ones; {HOW}"
        ));
    }
    if let Some(p) = repeated_pattern(&chars) {
        return Err(format!(
            "ADMIN_TOKEN is mostly a pattern of {p} characters repeated; {HOW}"
        ));
    }
    if let Some(run) = longest_run(&chars).filter(|&r| r >= MAX_RUN) {
        return Err(format!(
            "ADMIN_TOKEN has {run} characters in a row that are alike or in sequence (such as aaaa… or abcd…); {HOW}"
        ));
    }
    Ok(())
}

/// The shortest period p ≤ n/2 with which the token agrees with itself in all but an
/// eighth of the n − p places it can be compared in.
fn repeated_pattern(chars: &[char]) -> Option<usize> {
    let n = chars.len();
    (1..=n / 2).find(|&p| {
        let mismatches = (0..n - p).filter(|&i| chars[i] != chars[i + p]).count();
        mismatches * 8 <= n - p
    })
}

/// The longest stretch whose code points step by one same amount of −1, 0 or +1.
fn longest_run(chars: &[char]) -> Option<usize> {
    let step = |i: usize| i64::from(u32::from(chars[i + 1])) - i64::from(u32::from(chars[i]));
    let (mut best, mut len, mut last) = (1, 1, None);
    for i in 0..chars.len().saturating_sub(1) {
        let s = step(i);
        if (-1..=1).contains(&s) && last == Some(s) {
            len += 1;
        } else if (-1..=1).contains(&s) {
            len = 2;
        } else {
            len = 1;
        }
        last = Some(s);
        best = best.max(len);
    }
    (!chars.is_empty()).then_some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weak_tokens_are_refused_and_say_how_to_make_one() {
        for (token, why) in [
            ("a".repeat(31), "too short (31 characters): use at least 32"),
            ("a".repeat(32), "it is one character repeated"),
            ("t".repeat(40), "it is one character repeated"),
            (
                "abcabcabcabcabcabcabcabcabcabcab".into(),
                "it uses only 3 different",
            ),
            ("012345".repeat(6), "it uses only 6 different"),
            ("abcdefgh".repeat(4), "a pattern of 8 characters repeated"),
            ("password".repeat(5), "a pattern of 8 characters repeated"),
            (
                "correct-horse-".repeat(3),
                "a pattern of 14 characters repeated",
            ),
            // Repeated with a few characters changed.
            (
                "abcdefgh".repeat(3) + "abcdefXY",
                "a pattern of 8 characters repeated",
            ),
            (
                "abcdefghijklmnopqrstuvwxyz012345".into(),
                "26 characters in a row that are alike or in sequence",
            ),
            (
                "9f8e7d6c5b4a-zyxwvutsrqp-0c1d2e3f".into(),
                "11 characters in a row",
            ),
            (
                "x1y2z3qq".to_string() + &"0".repeat(12) + "k4l5m6n7p8r9",
                "12 characters in a row",
            ),
        ] {
            let err = check(&token).expect_err(&token);
            assert!(err.contains(why), "{token}: {err}");
            assert!(err.contains("openssl rand -hex 32"), "{err}");
            assert!(!err.contains(&token), "never quotes the token: {err}");
        }
    }

    #[test]
    fn made_tokens_pass() {
        for token in [
            // openssl rand -hex 16, -hex 32 and -base64 24.
            "3f9a0c2e7b4d18e6a5c09b7f2d3e4a1c",
            "9c1e4b7a2f0d8e3c6b5a4d9e0f1c2b3a7e8d9c0b1a2f3e4d5c6b7a8f9e0d1c2b",
            "q2Zk8s0Yh1Vb3Rn5Wx7Jc9Tf4Lp6Gd+M",
            // What the tests make: a prefix and a UUID's 32 hex digits.
            "test-token-0b4e6c8a2f1d4e3b9a7c5d0e1f2a3b4c",
        ] {
            assert_eq!(check(token), Ok(()), "{token}");
        }
    }

    #[test]
    fn random_hex_tokens_pass() {
        // 40,000 tokens of 32 hex digits and 20,000 of 64: at the rates computed below,
        // the chance that any of them is refused is about 1e-5.
        let mut bytes = vec![0u8; 32 * 1000];
        for _ in 0..20 {
            getrandom::fill(&mut bytes).unwrap();
            for chunk in bytes.chunks(16) {
                let token = hex::encode(chunk);
                assert_eq!(check(&token), Ok(()), "{token}");
            }
            for chunk in bytes.chunks(32) {
                let token = hex::encode(chunk);
                assert_eq!(check(&token), Ok(()), "{token}");
            }
        }
    }

    /// The chance that a token of `n` characters drawn uniformly from `alphabet` is refused,
    /// rule by rule (each exact or a union bound over places), as the module's text says.
    fn false_refusal(alphabet: &str, n: usize) -> [f64; 3] {
        let a = alphabet.chars().count() as f64;
        let choose = |n: usize, k: usize| -> f64 {
            (0..k).fold(1.0, |c, i| c * (n - i) as f64 / (i + 1) as f64)
        };
        // Rule 2: the strings that use exactly k of the letters, by inclusion–exclusion,
        // over all of them; computed in fractions of a^n to stay within f64.
        let exactly = |k: usize| -> f64 {
            (0..=k)
                .map(|j| {
                    let sign = if j % 2 == 0 { 1.0 } else { -1.0 };
                    sign * choose(k, j) * ((k - j) as f64 / a).powi(n as i32)
                })
                .sum::<f64>()
                * choose(alphabet.chars().count(), k)
        };
        let few = (1..MIN_DISTINCT).map(exactly).sum();
        // Rule 3: n − p independent agreements of chance 1/a; refused with at most an
        // eighth of them missing.
        let pattern = (1..=n / 2)
            .map(|p| {
                let c = n - p;
                (0..=c / 8)
                    .map(|m| choose(c, m) * ((a - 1.0) / a).powi(m as i32) / a.powi((c - m) as i32))
                    .sum::<f64>()
            })
            .sum();
        // Rule 4: the runs of MAX_RUN letters the alphabet holds, at each place.
        let letters: Vec<char> = alphabet.chars().collect();
        let runs = letters
            .iter()
            .flat_map(|&c| [-1i64, 0, 1].map(move |d| (c, d)))
            .filter(|&(c, d)| {
                (0..MAX_RUN as i64).all(|i| {
                    char::from_u32((u32::from(c) as i64 + d * i) as u32)
                        .is_some_and(|x| letters.contains(&x))
                })
            })
            .count() as f64;
        let run = (n - MAX_RUN + 1) as f64 * runs / a.powi(MAX_RUN as i32);
        [few, pattern, run]
    }

    #[test]
    fn a_random_hex_token_is_refused_less_than_once_in_a_billion() {
        let hex = "0123456789abcdef";
        let [few, pattern, run] = false_refusal(hex, 32);
        assert!((few - 1.843e-10).abs() < 0.001e-10, "{few:e}");
        assert!(pattern < 2e-15, "{pattern:e}");
        assert!((run - 2.001e-11).abs() < 0.001e-11, "{run:e}");
        assert!(few + pattern + run < 2.1e-10);
        let sum: f64 = false_refusal(hex, 64).iter().sum();
        assert!(sum < 5e-11, "{sum:e}");
        // Why rule 2 asks for 7 and not 8: six or seven letters used of 16.
        assert!(few < 1e-9);
    }
}
