//! Kafka's default partitioner for keyed records: `toPositive(murmur2(key)) % partitions`.

/// Kafka's `Utils.murmur2` (seed 0x9747b28c).
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len() as u32;
    let mut h = SEED ^ length;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = u32::from_le_bytes(chunk.try_into().expect("4 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    match tail.len() {
        3 => {
            h ^= u32::from(tail[2]) << 16;
            h ^= u32::from(tail[1]) << 8;
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(M);
        }
        2 => {
            h ^= u32::from(tail[1]) << 8;
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(M);
        }
        1 => {
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(M);
        }
        _ => {}
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for `key`.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    assert!(partitions > 0, "a topic has at least one partition");
    (murmur2(key) & 0x7fff_ffff) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_test_vectors() {
        // From Kafka's UtilsTest.testMurmur2.
        assert_eq!(murmur2(b"21"), -973_932_308);
        assert_eq!(murmur2(b"foobar"), -790_332_482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985_981_536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1_486_304_829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58_897_971
        );
        assert_eq!(murmur2(b"abc"), 479_470_107);
    }

    #[test]
    fn a_thousand_keys_go_to_the_partitions_the_java_client_picks() {
        // Computed by Kafka 4.4's own `Utils.murmur2` (tests/fixtures/Murmur2Partitions.java).
        let fixture = include_str!("../../tests/fixtures/murmur2-kafka-4.4.txt");
        let counts = [1, 3, 6, 7, 12, 100];
        let mut checked = 0;
        for line in fixture.lines().filter(|line| !line.starts_with('#')) {
            let fields: Vec<&str> = line.split(' ').collect();
            let key = fields[0].as_bytes();
            assert_eq!(
                murmur2(key),
                fields[1].parse::<i32>().expect("an int"),
                "{line}"
            );
            for (count, expected) in counts.iter().zip(&fields[2..]) {
                let expected: i32 = expected.parse().expect("an int");
                assert_eq!(
                    partition_for_key(key, *count),
                    expected,
                    "{line}: {count} partitions"
                );
            }
            checked += 1;
        }
        assert_eq!(checked, 1_000);
    }
}
