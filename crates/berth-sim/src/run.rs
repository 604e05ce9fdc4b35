//! The `berth simulate` command as a library call: options in, standard output, standard
//! error and exit status out. The binary only prints what [`run`] returns, so tests drive the
//! exact command without spawning it.

use std::io::Read;

use berth_core::{Config, Profile};

use crate::error::Error;
use crate::input;
use crate::output::{self, Format};
use crate::sim::Simulation;

/// `berth simulate`'s arguments.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Input files, in order; `-` is standard input.
    pub files: Vec<String>,
    /// `--config`: a `KubeSchedulerConfiguration` file.
    pub config: Option<String>,
    /// `-o`.
    pub output: Format,
    /// `--seed`: the seed for tie-breaking between equally scored nodes.
    pub seed: u64,
}

/// What the command prints and returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutput {
    /// Standard output: the rendered final state, or nothing on bad input.
    pub stdout: String,
    /// Standard error: warnings, failed expectations, the bad-input message.
    pub stderr: String,
    /// 0: the simulation ran; 1: an expectation failed; 2: bad input.
    pub code: i32,
}

/// Reads the scheduler profiles of a `KubeSchedulerConfiguration` file. Unknown plugins,
/// invalid args and unknown fields are errors naming the field.
pub fn load_config(path: &str) -> Result<Vec<Profile>, Error> {
    let mut file = std::fs::File::open(path).map_err(|source| Error::Read {
        file: path.to_string(),
        source,
    })?;
    let text = input::read_limited(path, &mut file)?;
    input::parse_config(path, &text)
}

/// Reads `options.files`; an input with no object and no Scenario is bad input
/// ([`Error::Empty`]): nothing to simulate is most likely the wrong file.
pub(crate) fn read_input(options: &Options, stdin: &mut dyn Read) -> Result<input::Input, Error> {
    let input = input::read_files(&options.files, stdin)?;
    if input.items.is_empty() && input.scenario.is_none() {
        let files: Vec<&str> = options
            .files
            .iter()
            .map(|f| {
                if f == "-" {
                    input::STDIN_NAME
                } else {
                    f.as_str()
                }
            })
            .collect();
        return Err(Error::Empty {
            files: files.join(", "),
        });
    }
    Ok(input)
}

/// Reads the input and runs the simulation to its end.
pub fn simulate(options: &Options, stdin: &mut dyn Read) -> Result<Simulation, Error> {
    let profiles = match &options.config {
        Some(path) => load_config(path)?,
        None => Vec::new(),
    };
    let input = read_input(options, stdin)?;
    let config = Config {
        seed: options.seed,
        ..Config::default()
    };
    Ok(Simulation::run_input(
        profiles,
        config,
        input,
        crate::sim::Hooks::default(),
    ))
}

/// Runs `berth simulate` and returns what it prints and its exit status.
pub fn run(options: &Options, stdin: &mut dyn Read) -> RunOutput {
    let sim = match simulate(options, stdin) {
        Ok(sim) => sim,
        Err(e) => {
            return RunOutput {
                stdout: String::new(),
                stderr: format!("error: {e}\n"),
                code: e.exit_code(),
            }
        }
    };
    let mut stderr = String::new();
    for line in sim.log() {
        stderr.push_str(line);
        stderr.push('\n');
    }
    let failed = sim.failed_expectations();
    if failed > 0 {
        stderr.push_str(&format!(
            "{failed} expectation{} failed\n",
            if failed == 1 { "" } else { "s" }
        ));
    }
    match output::render(&sim, options.output) {
        Ok(stdout) => RunOutput {
            stdout,
            stderr,
            code: if failed > 0 { 1 } else { 0 },
        },
        Err(e) => {
            stderr.push_str(&format!("error: {e}\n"));
            RunOutput {
                stdout: String::new(),
                stderr,
                code: 2,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> String {
        let dir = std::env::temp_dir().join(format!("berth-sim-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn standard_input_is_read_for_a_dash() {
        let opts = Options {
            files: vec!["-".into()],
            output: Format::Json,
            ..Options::default()
        };
        let mut stdin = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n".as_bytes();
        let out = run(&opts, &mut stdin);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(out.stdout.contains("\"name\": \"n1\""));
    }

    #[test]
    fn bad_input_prints_nothing_on_stdout_and_exits_2() {
        let opts = Options {
            files: vec!["-".into()],
            ..Options::default()
        };
        let mut stdin =
            "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\nkind: Widget\napiVersion: v1\n"
                .as_bytes();
        let out = run(&opts, &mut stdin);
        assert_eq!(out.code, 2);
        assert!(out.stdout.is_empty());
        assert!(
            out.stderr
                .contains("<stdin>: document 1: kind: unknown kind"),
            "{}",
            out.stderr
        );
    }

    #[test]
    fn an_empty_input_is_bad_input_saying_so() {
        for text in ["", "\n# only a comment\n", "---\n---\n"] {
            let opts = Options {
                files: vec!["-".into()],
                ..Options::default()
            };
            let out = run(&opts, &mut text.as_bytes());
            assert_eq!(out.code, 2, "{text:?}: {}", out.stderr);
            assert!(out.stdout.is_empty());
            assert!(
                out.stderr
                    .starts_with("error: <stdin>: no objects to simulate: the input is empty"),
                "{}",
                out.stderr
            );
        }
        let empty = write("empty.yaml", "");
        let opts = Options {
            files: vec![empty.clone()],
            ..Options::default()
        };
        let out = run(&opts, &mut std::io::empty());
        assert_eq!(out.code, 2);
        assert!(
            out.stderr.contains(&format!("{empty}: no objects")),
            "{}",
            out.stderr
        );
    }

    #[test]
    fn a_missing_file_is_bad_input() {
        let opts = Options {
            files: vec!["/nonexistent/berth.yaml".into()],
            ..Options::default()
        };
        let out = run(&opts, &mut std::io::empty());
        assert_eq!(out.code, 2);
        assert!(out.stderr.contains("/nonexistent/berth.yaml"));
    }

    #[test]
    fn a_config_with_an_unknown_plugin_is_bad_input_naming_the_field() {
        let cfg = write(
            "bad-config.yaml",
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  pluginConfig:\n  - name: NoSuchPlugin\n    args: {}\n",
        );
        let err = load_config(&cfg).expect_err("unknown plugin");
        let text = err.to_string();
        assert!(text.contains("profiles[0].pluginConfig[0].name"), "{text}");
        let cfg = write(
            "typo-config.yaml",
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerNam: x\n",
        );
        assert!(load_config(&cfg).is_err());
    }

    #[test]
    fn a_valid_config_is_accepted() {
        let cfg = write(
            "ok-config.yaml",
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n",
        );
        let profiles = load_config(&cfg).unwrap();
        assert_eq!(profiles.len(), 1);
    }
}
