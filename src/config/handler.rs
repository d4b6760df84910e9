//! `[handlers.KIND]`: a command or SQL handler as the file spells it, checked into a [`HandlerSpec`].

use std::collections::BTreeMap;

use serde::Deserialize;

use super::HumanDuration;
use crate::handler::HandlerSpec;

/// `[handlers.KIND]`: exactly one of `command` or `sql`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerConfig {
    /// Program and arguments; the payload goes to its stdin.
    pub command: Option<Vec<String>>,
    /// Extra environment for the command.
    pub env: Option<BTreeMap<String, String>>,
    /// When set, only these variables of the worker's environment reach the command (besides `env`
    /// and the job's own `JOBQ_*` variables). Unset: all of them, except jobq's secrets (see
    /// [`crate::handler::command`]).
    pub inherit_env: Option<Vec<String>>,
    /// One SQL statement with `?` placeholders.
    pub sql: Option<String>,
    /// Payload fields bound to the placeholders, in order.
    pub params: Option<Vec<String>>,
    /// Run-time limit for jobs of this kind that set none themselves.
    pub timeout: Option<HumanDuration>,
}

impl HandlerConfig {
    /// Checks that the entry is one complete handler and turns it into a spec.
    pub fn spec(&self) -> std::result::Result<HandlerSpec, String> {
        match (&self.command, &self.sql) {
            (Some(_), Some(_)) => Err("set either `command` or `sql`, not both".into()),
            (None, None) => Err("set `command` (a program) or `sql` (a statement)".into()),
            (Some(argv), None) => {
                if self.params.is_some() {
                    return Err(
                        "`params` belongs to `sql` handlers; a command reads the payload on stdin"
                            .into(),
                    );
                }
                if argv.is_empty() || argv[0].is_empty() {
                    return Err(
                        "`command` must name a program: command = [\"prog\", \"arg\"]".into(),
                    );
                }
                Ok(HandlerSpec::Command {
                    argv: argv.clone(),
                    env: self.env.clone().unwrap_or_default(),
                    inherit_env: self.inherit_env.clone(),
                })
            }
            (None, Some(sql)) => {
                if self.env.is_some() || self.inherit_env.is_some() {
                    return Err("`env` and `inherit_env` belong to `command` handlers".into());
                }
                let params = self.params.clone().unwrap_or_default();
                let placeholders = count_placeholders(sql);
                if placeholders != params.len() {
                    return Err(format!(
                        "`sql` has {placeholders} `?` placeholder(s) but `params` names {} field(s)",
                        params.len()
                    ));
                }
                if sql.trim().trim_end_matches(';').contains(';') {
                    return Err(
                        "`sql` must be one statement; wrap several in a procedure and CALL it"
                            .into(),
                    );
                }
                Ok(HandlerSpec::Sql {
                    sql: sql.trim().trim_end_matches(';').to_string(),
                    params,
                })
            }
        }
    }
}

/// Counts `?` outside quoted strings and backquoted names.
fn count_placeholders(sql: &str) -> usize {
    let mut n = 0;
    let mut quote: Option<char> = None;
    let mut chars = sql.chars();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) if c == '\\' && q != '`' => {
                chars.next();
            }
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if matches!(c, '\'' | '"' | '`') => quote = Some(c),
            None if c == '?' => n += 1,
            None => {}
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_inside_strings_do_not_count() {
        assert_eq!(count_placeholders("SELECT '?', \"?\", `?`, ?"), 1);
        assert_eq!(count_placeholders("SELECT 'it\\'s ?', ?"), 1);
    }
}
