//! Korean romanisation as coqui's Korean path does it after the cleaners
//! (`ko_speech_tools.hangul_romanize`, the academic variant of the Revised Romanization):
//! each precomposed syllable becomes initial + vowel + final in Latin letters, and a "-" goes
//! between two adjacent syllables when the second starts with the silent ㅇ or when the first's
//! final and the second's initial could be split another way ("kk": "k|k" or "kk|").
//! Anything that is not a syllable (jamo, Latin, spaces) passes through and breaks adjacency.

const INITIALS: [&str; 19] = [
    "g", "kk", "n", "d", "tt", "l", "m", "b", "pp", "s", "ss", "", "j", "jj", "ch", "k", "t", "p",
    "h",
];
const VOWELS: [&str; 21] = [
    "a", "ae", "ya", "yae", "eo", "e", "yeo", "ye", "o", "wa", "wae", "oe", "yo", "u", "wo", "we",
    "wi", "yu", "eu", "ui", "i",
];
const FINALS: [&str; 28] = [
    "", "g", "kk", "gs", "n", "nj", "nh", "d", "l", "lg", "lm", "lb", "ls", "lt", "lp", "lh", "m",
    "b", "bs", "s", "ss", "ng", "j", "ch", "k", "t", "p", "h",
];

/// A precomposed syllable's (initial, vowel, final) indices.
fn syllable(c: char) -> Option<(usize, usize, usize)> {
    let index = (c as u32).checked_sub('가' as u32)? as usize;
    (c <= '힣').then_some((index / 588, (index / 28) % 21, index % 28))
}

/// Whether `final + initial` splits into a final and a (non-empty) initial in more than one
/// way.
fn ambiguous(joined: &str) -> bool {
    (0..joined.len())
        .filter(|&at| FINALS.contains(&&joined[..at]) && INITIALS.contains(&&joined[at..]))
        .count()
        > 1
}

pub fn romanize(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let mut previous_final: Option<usize> = None;
    for c in text.chars() {
        let Some((initial, vowel, last)) = syllable(c) else {
            out.push(c);
            previous_final = None;
            continue;
        };
        if let Some(previous) = previous_final {
            if INITIALS[initial].is_empty()
                || ambiguous(&format!("{}{}", FINALS[previous], INITIALS[initial]))
            {
                out.push('-');
            }
        }
        out.push_str(INITIALS[initial]);
        out.push_str(VOWELS[vowel]);
        out.push_str(FINALS[last]);
        previous_final = Some(last);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::romanize;

    #[test]
    fn syllables_and_markers() {
        assert_eq!(romanize("물엿"), "mul-yeos");
        assert_eq!(romanize("안녕하세요 세계"), "annyeonghase-yo segye");
        assert_eq!(romanize("각가 앉아 ㄱ a"), "gagga anj-a ㄱ a");
        assert_eq!(romanize("가까 갓사"), "ga-kka gas-sa");
    }
}
