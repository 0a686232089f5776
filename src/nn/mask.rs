//! Additive attention masks built on the host: the causal sliding window every family here
//! uses (Voxtral Realtime's encoder and decoder, Qwen3-TTS's speech-tokenizer transformers,
//! the shared decoder's chunked prefill).

use crate::tensor::{DType, Tensor};

/// `[queries][keys]`, row-major: 0 where the key at position `key_start + j` is visible from
/// the query at position `query_start + i` (`0 ≤ query − key < window`, itself included;
/// `None`: every earlier key), −∞ elsewhere.
pub fn sliding_window_bias(
    query_start: usize,
    queries: usize,
    key_start: usize,
    keys: usize,
    window: Option<usize>,
) -> Vec<f32> {
    let window = window.unwrap_or(usize::MAX);
    let mut bias = Vec::with_capacity(queries * keys);
    for query in query_start..query_start + queries {
        for key in key_start..key_start + keys {
            let visible = key <= query && query - key < window;
            bias.push(if visible { 0.0 } else { f32::NEG_INFINITY });
        }
    }
    bias
}

/// [`sliding_window_bias`] as a `[1, 1, queries, keys]` tensor.
pub fn sliding_window_mask<T: Tensor>(
    device: &T::Device,
    dtype: DType,
    (query_start, queries): (usize, usize),
    (key_start, keys): (usize, usize),
    window: Option<usize>,
) -> T {
    let bias = sliding_window_bias(query_start, queries, key_start, keys, window);
    T::from_f32(device, &bias, &[1, 1, queries, keys], dtype)
}

#[cfg(test)]
mod tests {
    use super::sliding_window_bias;

    fn visible(bias: &[f32], keys: usize) -> Vec<Vec<usize>> {
        bias.chunks(keys)
            .map(|row| (0..keys).filter(|&j| row[j] == 0.0).collect())
            .collect()
    }

    #[test]
    fn a_query_sees_itself_and_the_window_before_it() {
        let bias = sliding_window_bias(0, 4, 0, 4, Some(2));
        assert_eq!(
            visible(&bias, 4),
            [vec![0], vec![0, 1], vec![1, 2], vec![2, 3]]
        );
        assert!(bias.iter().all(|&b| b == 0.0 || b == f32::NEG_INFINITY));
        let causal = sliding_window_bias(0, 3, 0, 3, None);
        assert_eq!(visible(&causal, 3), [vec![0], vec![0, 1], vec![0, 1, 2]]);
    }

    #[test]
    fn offsets_place_queries_and_keys_at_their_positions() {
        // Queries at 5 and 6 over keys at positions 3..7, window 2.
        let bias = sliding_window_bias(5, 2, 3, 4, Some(2));
        assert_eq!(visible(&bias, 4), [vec![1, 2], vec![2, 3]]);
    }
}
