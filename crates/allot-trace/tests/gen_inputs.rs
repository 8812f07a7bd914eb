//! Generated inputs handed over in memory are what writing them as files
//! and reading them back gives, and they are checked by the same code.

use allot_trace::config::parse_config;
use allot_trace::generate::{Ai2Params, Generated, Scenario, generate};
use allot_trace::trace::parse_trace_csv;
use allot_trace::write::{write_config_toml, write_trace_csv};

fn generated(seed: u64) -> Generated {
    generate(Scenario::Ai2, &Ai2Params { gpus: 128, days: 2, seed, ..Ai2Params::default() }).unwrap()
}

#[test]
fn in_memory_inputs_equal_the_files_read_back() {
    for seed in [1, 2, 3] {
        let g = generated(seed);
        let (config, trace) = g.inputs("gen").unwrap();
        let mut toml = Vec::new();
        write_config_toml(&mut toml, &g.config).unwrap();
        let text = String::from_utf8(toml).unwrap();
        let parsed = parse_config(&text, "gen config").unwrap();
        let mut csv = Vec::new();
        write_trace_csv(&mut csv, &g.rows).unwrap();
        let parsed_trace = parse_trace_csv(csv.as_slice(), "gen trace", &parsed).unwrap();
        assert_eq!(format!("{config:?}"), format!("{parsed:?}"), "seed {seed}: config, its text and name");
        assert_eq!(trace, parsed_trace, "seed {seed}: workloads (utilisation as the file rounds it)");
    }
}

#[test]
fn bad_generated_rows_and_configs_are_errors_as_in_files() {
    let mut g = generated(1);
    g.rows[1].account = "ai2/nobody".into();
    let err = g.inputs("gen").unwrap_err();
    assert_eq!(err.to_string(), "gen trace:3: field `account`: unknown account \"ai2/nobody\"");

    let mut g = generated(1);
    g.rows[0].work_s = 0;
    let err = g.inputs("gen").unwrap_err();
    assert_eq!((err.line, err.field.as_deref()), (Some(2), Some("work_s")), "{err}");

    let mut g = generated(1);
    let first = g.config.pools[0].name.clone();
    g.config.pools[1].name = first.clone();
    let err = g.inputs("gen").unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "gen config: key `cluster.pools[1].name`: pool {first:?} is declared twice (first as cluster.pools[0])"
        )
    );

    let mut g = generated(1);
    g.config.gpu_types.push(g.config.gpu_types[0].clone());
    let err = g.inputs("gen").unwrap_err();
    assert!(err.to_string().contains("gpu type is declared twice"), "{err}");
}
