//! The OLTP protocol's tests: its key distributions, scripts and names.

use super::*;

fn protocol(script: Script, rand: RandType) -> OltpProtocol {
    OltpProtocol::new("host=/tmp dbname=x", script, 10, 100_000, rand).unwrap()
}

/// Pearson's chi-square statistic of observed counts against equal expected ones.
fn chi_square(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let expected = total as f64 / counts.len() as f64;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

#[test]
fn digits_are_sysbenchs_pattern_uniform_and_independent() {
    let mut rng = Prng::seeded(20261128);
    let (mut singles, mut pairs, mut leading) = ([0u64; 10], [0u64; 100], [0u64; 10]);
    let mut c = [0u8; C_LEN];
    for _ in 0..20_000 {
        digits(&mut rng, &mut c);
        let text = std::str::from_utf8(&c).unwrap();
        let groups: Vec<&str> = text.split('-').collect();
        // 10 groups of 11 digits joined by dashes (sysbench's c), the last group cut at C_LEN
        assert!(groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_digit())));
        assert!(
            groups[..groups.len() - 1].iter().all(|g| g.len() == 11),
            "{text}"
        );
        let ds: Vec<usize> = c
            .iter()
            .filter(|b| b.is_ascii_digit())
            .map(|b| (b - b'0') as usize)
            .collect();
        for d in &ds {
            singles[*d] += 1;
        }
        // each draw's 18th digit (its leading one, taken last): kept without
        // the rejection, remainders below 2^64 - 18 x 10^18 (about 4.5 x 10^17)
        // would come 19 times for 18 and favour 0-4 there
        for d in ds.iter().skip(17).step_by(18) {
            leading[*d] += 1;
        }
        // neighbours, across each 18-digit draw's boundary too
        for w in ds.windows(2) {
            pairs[w[0] * 10 + w[1]] += 1;
        }
    }
    // Critical values at p = 0.001: 27.88 for 9 degrees of freedom, 148.23
    // for 99 (scipy.stats.chi2.ppf(0.999, 9) and (0.999, 99)). Without the
    // rejection, the leading digits of 120,000 draws gave chi-square 75-110
    // in a simulation (Python's getrandbits(64), 5 samples); with it, 8-16.
    let (one, two) = (chi_square(&singles), chi_square(&pairs));
    let lead = chi_square(&leading);
    assert!(one < 27.88, "digit counts {singles:?}: chi-square {one}");
    assert!(two < 148.23, "neighbour counts: chi-square {two}");
    assert_eq!(leading.iter().sum::<u64>(), 20_000 * 6); // 110 digits: 6 whole draws
    assert!(
        lead < 27.88,
        "leading digits {leading:?}: chi-square {lead}"
    );
    // and the test can fail: a generator that never draws 9 is refused
    let mut skewed = singles;
    skewed[0] += skewed[9];
    skewed[9] = 0;
    assert!(chi_square(&skewed) > 27.88);
}

#[test]
fn read_only_scripts_are_those_without_a_write() {
    let writes = [
        Kind::IndexUpdate,
        Kind::NonIndexUpdate,
        Kind::Delete,
        Kind::Insert,
        Kind::InsertAuto,
    ];
    for script in Script::ALL {
        let writing = script.statements().iter().any(|k| writes.contains(k));
        assert_eq!(script.read_only(), !writing, "{}", script.name());
        assert_eq!(
            protocol(script, RandType::Uniform).read_only(),
            !writing,
            "{}",
            script.name()
        );
    }
    assert!(Script::PointSelect.read_only() && Script::ReadOnly.read_only());
}

#[test]
fn every_statement_has_its_histograms_name() {
    assert_eq!(STATEMENT_NAMES[Kind::Begin.statement()], "begin");
    assert_eq!(
        STATEMENT_NAMES[Kind::PointSelect.statement()],
        "point_select"
    );
    assert_eq!(
        STATEMENT_NAMES[Kind::NonIndexUpdate.statement()],
        "non_index_update"
    );
    assert_eq!(STATEMENT_NAMES[Kind::Insert.statement()], "insert");
    assert_eq!(STATEMENT_NAMES[Kind::InsertAuto.statement()], "insert");
    assert_eq!(STATEMENT_NAMES[Kind::Commit.statement()], "commit");
    let mut t = StatementTimes::new(2);
    t.start();
    t.answered(Kind::Begin);
    t.answered(Kind::InsertAuto);
    t.start(); // a retry forgets the first try
    t.answered(Kind::Delete);
    let mut seen = Vec::new();
    t.take(|k, _| seen.push(k));
    assert_eq!(seen, vec![Kind::Delete.statement()]);
    t.take(|_, _| panic!("taken twice"));
}

#[test]
fn read_write_is_sysbenchs_mix() {
    let p = protocol(Script::ReadWrite, RandType::Uniform);
    let d = p.draw(&mut Prng::seeded(1));
    let count = |k: Kind| d.steps.iter().filter(|s| s.kind == k).count();
    assert_eq!(d.steps.len(), 20);
    assert_eq!(count(Kind::PointSelect), 10);
    assert_eq!(count(Kind::Delete) + count(Kind::Insert), 2);
    // one table per group; the insert puts back the id just deleted
    let ps: Vec<_> = d
        .steps
        .iter()
        .filter(|s| s.kind == Kind::PointSelect)
        .collect();
    assert!(ps.iter().all(|s| s.table == ps[0].table));
    let del = d.steps.iter().find(|s| s.kind == Kind::Delete).unwrap();
    let ins = d.steps.iter().find(|s| s.kind == Kind::Insert).unwrap();
    assert_eq!((del.table, del.a), (ins.table, ins.a));
    let range = d.steps.iter().find(|s| s.kind == Kind::SumRange).unwrap();
    assert_eq!(range.b - range.a, RANGE_SIZE - 1);
    assert_eq!(d.c_insert[11], b'-');
    assert!(d.pad.iter().all(|b| b.is_ascii_digit() || *b == b'-'));
}

#[test]
fn keys_stay_in_range_and_special_favours_the_middle() {
    let mut rng = Prng::seeded(7);
    for rand_type in [
        RandType::Uniform,
        RandType::Gaussian,
        RandType::Special,
        RandType::Pareto,
    ] {
        let keys = KeyRand { rand_type, n: 1000 };
        assert!((0..20_000)
            .map(|_| keys.draw(&mut rng))
            .all(|k| (1..=1000).contains(&k)));
    }
    let special = KeyRand {
        rand_type: RandType::Special,
        n: 100_000,
    };
    let middle = (0..10_000)
        .filter(|_| (49_501..=50_500).contains(&special.draw(&mut rng)))
        .count();
    // 75% of draws go to the middle 1%, plus the bell's share of it
    assert!((7_400..8_200).contains(&middle), "{middle}");
    let pareto = KeyRand {
        rand_type: RandType::Pareto,
        n: 100_000,
    };
    let low = (0..10_000)
        .filter(|_| pareto.draw(&mut rng) <= 1000)
        .count();
    assert!(low > 5_000, "{low}");
}

#[test]
fn names_parse_and_unknown_names_say_what_is_allowed() {
    assert_eq!("read_only".parse::<Script>().unwrap(), Script::ReadOnly);
    assert!("oltp_read_only"
        .parse::<Script>()
        .unwrap_err()
        .contains("point_select"));
    assert!("zipfian".parse::<RandType>().is_err());
    assert_eq!(Script::PointSelect.statements(), vec![Kind::PointSelect]);
    assert_eq!(Script::WriteOnly.statements().len(), 6);
}
