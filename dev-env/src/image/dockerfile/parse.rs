//! Reading a Dockerfile as the engine's classic builder reads it, into a
//! [`Plan`], or the [`NotPlannable`] reason the engine must build it.

use super::*;

/// The lines of `text` without their line ends; refuses characters whose
/// reading differs between parsers: control characters, and whitespace
/// other than spaces and tabs.
pub(super) fn physical_lines(text: &str) -> Result<Vec<&str>, NotPlannable> {
    let mut lines = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.trim_end_matches('\r');
        let unusual = |c: char| {
            c == '\r'
                || (c != '\t' && c.is_control())
                || (c.is_whitespace() && c != ' ' && c != '\t')
        };
        if let Some(c) = line.chars().find(|&c| unusual(c)) {
            return Err(NotPlannable {
                line: Some(i + 1),
                instruction: line.trim().to_string(),
                reason: format!("the character {c:?}: dev-env reads spaces and tabs only"),
            });
        }
        lines.push(line);
    }
    Ok(lines)
}

/// Refuses parser directives other than `# syntax=` at the top of the file.
pub(super) fn check_directives(lines: &[&str]) -> Result<(), NotPlannable> {
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = directive(line) else {
            return Ok(());
        };
        if !name.eq_ignore_ascii_case("syntax") {
            return Err(NotPlannable {
                line: Some(i + 1),
                instruction: line.trim().to_string(),
                reason: format!("the parser directive `{name}`: dev-env reads none but `syntax`"),
            });
        }
    }
    Ok(())
}

/// The name of the parser directive `line` is (`# name=value`), if it is one.
pub(super) fn directive(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start();
    let end = rest
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(rest.len());
    let name = &rest[..end];
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    let value = rest[end..].trim_start().strip_prefix('=')?;
    (!value.trim().is_empty()).then_some(name)
}

/// An instruction: its continuation lines joined, comments left out.
pub(super) struct Instruction {
    /// The line it starts on, from 1.
    line: usize,
    text: String,
}

impl Instruction {
    fn refuse(&self, reason: impl Into<String>) -> NotPlannable {
        NotPlannable {
            line: Some(self.line),
            instruction: self.text.trim().to_string(),
            reason: reason.into(),
        }
    }
}

/// The instructions of `lines`, joined as the engine's parser joins them:
/// the first line without leading whitespace, continuation lines as they
/// are, comment and blank lines inside an instruction skipped.
pub(super) fn instructions(lines: &[&str]) -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = i + 1;
        let first = lines[i].trim_start();
        i += 1;
        if first.starts_with('#') {
            continue;
        }
        let (head, mut done) = continuation(first);
        if done && head.is_empty() {
            continue;
        }
        let mut text = head.to_string();
        while !done && i < lines.len() {
            let next = lines[i];
            i += 1;
            if next.trim_start().starts_with('#') || next.trim().is_empty() {
                continue;
            }
            let (part, end) = continuation(next);
            text.push_str(part);
            done = end;
        }
        out.push(Instruction { line, text });
    }
    out
}

/// `line` without its line-continuation `\` (one that does not follow
/// another `\`), and whether the instruction ends with it.
pub(super) fn continuation(line: &str) -> (&str, bool) {
    let trimmed = line.trim_end_matches([' ', '\t']);
    match trimmed.strip_suffix('\\') {
        Some(before) if !before.ends_with('\\') => (before, false),
        _ => (line, true),
    }
}

/// An instruction's keyword (lowercase), its flags (without `--`) and the
/// rest of it.
pub(super) fn split(inst: &Instruction) -> Result<(String, Vec<String>, &str), NotPlannable> {
    let text = inst.text.trim();
    let (keyword, mut rest) = match text.find([' ', '\t']) {
        Some(i) => (&text[..i], &text[i..]),
        None => (text, ""),
    };
    let mut flags = Vec::new();
    loop {
        let r = rest.trim_start();
        if !r.starts_with("--") {
            return Ok((keyword.to_ascii_lowercase(), flags, r.trim_end()));
        }
        let end = r.find([' ', '\t']).unwrap_or(r.len());
        let word = &r[..end];
        if word == "--" || word.contains(['\'', '"', '\\']) {
            return Err(inst.refuse(format!("the flag `{word}`")));
        }
        flags.push(word[2..].to_string());
        rest = &r[end..];
    }
}

/// The state of the image as instructions are read.
#[derive(Default)]
pub(super) struct Builder {
    /// Set by FROM: the stage's name, if it has one.
    stage: Option<Option<String>>,
    config: RunConfig,
    /// A CMD came in this stage: a later ENTRYPOINT keeps it.
    cmd_set: bool,
    steps: Vec<Step>,
    instructions: Vec<String>,
}

impl Builder {
    pub(super) fn dispatch(&mut self, inst: &Instruction) -> Result<(), NotPlannable> {
        if inst.text.contains('$') {
            return Err(inst.refuse("`$`: variables are the engine's to expand"));
        }
        let (keyword, flags, args) = split(inst)?;
        if self.stage.is_none() && keyword != "from" {
            return Err(inst.refuse("an instruction before FROM"));
        }
        if !flags.is_empty() && !matches!(keyword.as_str(), "from" | "copy") {
            return Err(inst.refuse(format!("the flag `--{}`", flags[0])));
        }
        if args.contains('\\') && !matches!(keyword.as_str(), "entrypoint" | "cmd") {
            return Err(inst.refuse("`\\`: escapes are the engine's to read"));
        }
        match keyword.as_str() {
            "from" => self.from(inst, &flags, args)?,
            "copy" => self.copy(inst, &flags, args)?,
            "env" => self.env(inst, args)?,
            "label" => self.label(inst, args)?,
            "user" => self.config.user = Some(plain_word(inst, args)?.to_string()),
            "workdir" => self.workdir(inst, args)?,
            "expose" => self.expose(inst, args)?,
            "stopsignal" => self.stop_signal(inst, args)?,
            "entrypoint" => {
                self.config.entrypoint = Some(command(inst, args)?);
                if !self.cmd_set {
                    self.config.cmd = None;
                }
            }
            "cmd" => {
                self.config.cmd = Some(command(inst, args)?);
                self.cmd_set = true;
            }
            other => return Err(inst.refuse(unsupported(other))),
        }
        self.instructions.push(inst.text.trim().to_string());
        Ok(())
    }

    fn from(
        &mut self,
        inst: &Instruction,
        flags: &[String],
        args: &str,
    ) -> Result<(), NotPlannable> {
        if self.stage.is_some() {
            return Err(inst.refuse("a second stage: multi-stage builds are the engine's"));
        }
        if let Some(flag) = flags.first() {
            return Err(inst.refuse(format!("the flag `--{flag}`")));
        }
        let words: Vec<&str> = args.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
        let name = match words.as_slice() {
            ["scratch"] => None,
            ["scratch", as_, name] if as_.eq_ignore_ascii_case("as") => {
                let name = name.to_ascii_lowercase();
                if !stage_name(&name) {
                    return Err(inst.refuse(format!("the stage name `{name}`")));
                }
                Some(name)
            }
            [base, ..] if *base != "scratch" => {
                return Err(inst.refuse("a base image: dev-env starts from `scratch` only"));
            }
            _ => return Err(inst.refuse("FROM takes `scratch` or `scratch AS <name>`")),
        };
        self.stage = Some(name);
        self.config.env.push(DEFAULT_PATH.to_string());
        Ok(())
    }

    fn copy(
        &mut self,
        inst: &Instruction,
        flags: &[String],
        args: &str,
    ) -> Result<(), NotPlannable> {
        let owner = copy_owner(inst, flags)?;
        if args.contains("<<") {
            return Err(inst.refuse("a here-document"));
        }
        let words = copy_words(args);
        for word in &words {
            if let Some(c) = word.chars().find(|c| "'\"\\*?[".contains(*c)) {
                return Err(inst.refuse(format!(
                    "`{c}` in `{word}`: quotes, escapes and wildcards are the engine's to read"
                )));
            }
        }
        let Some((dest, sources)) = words.split_last().filter(|(_, s)| !s.is_empty()) else {
            return Err(inst.refuse("COPY takes sources and a destination"));
        };
        if sources.len() > 1 && !dest.ends_with('/') {
            return Err(inst.refuse(
                "several sources and a destination that does not end with `/`, which the engine refuses",
            ));
        }
        let sources = sources
            .iter()
            .map(|source| source_path(inst, source))
            .collect::<Result<Vec<_>, _>>()?;
        let dest_path = match dest.starts_with('/') {
            true => clean(dest),
            false => clean(&format!("{}/{dest}", self.working_dir())),
        };
        self.steps.push(Step::Copy(CopyStep {
            line: inst.line,
            instruction: inst.text.trim().to_string(),
            sources,
            dest: dest_path,
            dest_is_dir: dest.ends_with('/'),
            owner,
        }));
        Ok(())
    }

    fn env(&mut self, inst: &Instruction, args: &str) -> Result<(), NotPlannable> {
        for (key, value) in name_values(args).map_err(|why| inst.refuse(why))? {
            let var = format!("{key}={value}");
            let existing = self
                .config
                .env
                .iter_mut()
                .find(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k) == key);
            match existing {
                Some(existing) => *existing = var,
                None => self.config.env.push(var),
            }
        }
        Ok(())
    }

    fn label(&mut self, inst: &Instruction, args: &str) -> Result<(), NotPlannable> {
        let pairs = name_values(args).map_err(|why| inst.refuse(why))?;
        self.config.labels.extend(pairs);
        Ok(())
    }

    fn workdir(&mut self, inst: &Instruction, args: &str) -> Result<(), NotPlannable> {
        if args.is_empty() || args.contains(['\'', '"']) {
            return Err(inst.refuse("WORKDIR takes one path, without quotes"));
        }
        let path = match args.starts_with('/') {
            true => clean(args),
            false => clean(&format!("{}/{args}", self.working_dir())),
        };
        let top = path.split('/').nth(1).unwrap_or_default();
        if INIT_LAYER.contains(&top) {
            return Err(inst.refuse(format!(
                "a directory in `/{top}`, which the engine creates over its container's init layer"
            )));
        }
        self.config.working_dir = Some(path.clone());
        self.steps.push(Step::Workdir {
            line: inst.line,
            path,
        });
        Ok(())
    }

    fn expose(&mut self, inst: &Instruction, args: &str) -> Result<(), NotPlannable> {
        let specs: Vec<&str> = args.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
        if specs.is_empty() {
            return Err(inst.refuse("EXPOSE takes ports"));
        }
        for spec in specs {
            let port = port(spec).ok_or_else(|| {
                inst.refuse(format!(
                    "`{spec}`: dev-env reads `<port>[/tcp|/udp|/sctp]` only"
                ))
            })?;
            self.config.exposed_ports.insert(port);
        }
        Ok(())
    }

    fn stop_signal(&mut self, inst: &Instruction, args: &str) -> Result<(), NotPlannable> {
        if !signal(args) {
            return Err(inst.refuse(format!("`{args}`, not a signal dev-env knows")));
        }
        self.config.stop_signal = Some(args.to_string());
        Ok(())
    }

    /// The WORKDIR so far: empty, or absolute and clean.
    fn working_dir(&self) -> &str {
        self.config.working_dir.as_deref().unwrap_or_default()
    }

    pub(super) fn finish(self, target: Option<&str>) -> Result<Plan, NotPlannable> {
        let whole = |reason: String| NotPlannable {
            line: None,
            instruction: String::new(),
            reason,
        };
        let Some(stage) = self.stage else {
            return Err(whole(String::from("it has no FROM instruction")));
        };
        if let Some(target) = target.filter(|t| !t.is_empty())
            && !stage
                .as_deref()
                .is_some_and(|name| name.eq_ignore_ascii_case(target))
        {
            return Err(whole(format!(
                "the target stage `{target}` is not its stage"
            )));
        }
        Ok(Plan {
            stage,
            steps: self.steps,
            config: self.config,
            instructions: self.instructions,
        })
    }
}

/// Why dev-env leaves an instruction it does not carry out to the engine.
pub(super) fn unsupported(keyword: &str) -> String {
    match keyword {
        "run" => String::from("dev-env runs no commands"),
        "add" => String::from("ADD, which may fetch and unpack; dev-env carries out COPY"),
        "arg" => String::from("build arguments are the engine's"),
        "volume" | "healthcheck" | "onbuild" | "shell" | "maintainer" => {
            format!(
                "dev-env leaves {} to the engine",
                keyword.to_ascii_uppercase()
            )
        }
        _ => String::from("an instruction dev-env does not know"),
    }
}

/// A stage name as the engine accepts it: `[a-z][a-z0-9-_.]*`, lowercase.
pub(super) fn stage_name(name: &str) -> bool {
    name != "scratch"
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c))
}

/// The owner `--chown` gives, 0:0 without it; refuses every other flag.
pub(super) fn copy_owner(inst: &Instruction, flags: &[String]) -> Result<(u32, u32), NotPlannable> {
    let mut owner = None;
    for flag in flags {
        let (name, value) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (flag.as_str(), None),
        };
        match (name, value) {
            ("chown", Some(value)) if owner.is_none() => {
                owner = Some(numeric_owner(value).ok_or_else(|| {
                    inst.refuse(format!(
                        "`--chown={value}`: dev-env reads numeric `<uid>[:<gid>]` only; names need the image's /etc/passwd"
                    ))
                })?);
            }
            ("chown", _) => return Err(inst.refuse("`--chown` twice, or without a value")),
            ("chmod", _) => {
                return Err(inst.refuse(
                    "`--chmod`, which the engine's classic builder refuses (it requires BuildKit)",
                ));
            }
            (name, _) => return Err(inst.refuse(format!("the flag `--{name}`"))),
        }
    }
    Ok(owner.unwrap_or((0, 0)))
}

/// `<uid>[:<gid>]` in digits; a lone uid is the gid too, as the engine has it.
pub(super) fn numeric_owner(value: &str) -> Option<(u32, u32)> {
    let (user, group) = value.split_once(':').unwrap_or((value, value));
    let id = |s: &str| {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse::<u32>().ok().filter(|id| *id <= i32::MAX as u32)
    };
    Some((id(user)?, id(group)?))
}

/// COPY's arguments: the JSON form's strings, or words split at whitespace.
pub(super) fn copy_words(args: &str) -> Vec<String> {
    if args.starts_with('[')
        && let Ok(words) = serde_json::from_str::<Vec<String>>(args)
    {
        return words;
    }
    args.split([' ', '\t'])
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// A COPY source as a clean path relative to the context.
pub(super) fn source_path(inst: &Instruction, source: &str) -> Result<String, NotPlannable> {
    let refuse = |why: &str| Err(inst.refuse(format!("the source `{source}`: {why}")));
    if source.contains("://") {
        return refuse("URLs are the engine's");
    }
    let trimmed = source.strip_prefix('/').unwrap_or(source);
    let trimmed = trimmed.strip_prefix("./").unwrap_or(trimmed);
    let parts: Vec<&str> = trimmed.split('/').filter(|p| !p.is_empty()).collect();
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return refuse("`.` and `..` in paths are the engine's");
    }
    if parts.is_empty() {
        return refuse("copying the whole context is the engine's");
    }
    let path = parts.join("/");
    if path == OUTSIDE_DOCKERFILE {
        return refuse("it is the name dev-env gives a Dockerfile from outside the context");
    }
    Ok(path)
}

/// `path` made absolute and clean, `..` stopping at the root.
pub(super) fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

/// One word, as USER takes it.
pub(super) fn plain_word<'a>(inst: &Instruction, args: &'a str) -> Result<&'a str, NotPlannable> {
    if args.is_empty() || args.contains([' ', '\t', '\'', '"']) {
        return Err(inst.refuse("it takes one word, without quotes"));
    }
    Ok(args)
}

/// `NAME=value ...` or the legacy `NAME value`, unquoted, as ENV and LABEL
/// read them.
pub(super) fn name_values(args: &str) -> Result<Vec<(String, String)>, String> {
    let words = words(args);
    let Some(first) = words.first() else {
        return Err(String::from("no name and value"));
    };
    let raw: Vec<(&str, &str)> = if first.contains('=') {
        words
            .iter()
            .map(|w| w.split_once('=').ok_or_else(|| format!("`{w}` has no `=`")))
            .collect::<Result<_, _>>()?
    } else {
        let (name, value) = args
            .split_once([' ', '\t'])
            .ok_or_else(|| String::from("a name without a value"))?;
        vec![(name, value.trim_start_matches([' ', '\t']))]
    };
    raw.into_iter()
        .map(|(name, value)| {
            let name = unquote(name)?;
            if name.is_empty() {
                return Err(String::from("an empty name"));
            }
            Ok((name, unquote(value)?))
        })
        .collect()
}

/// `args` split at whitespace outside quotes, the quotes kept.
pub(super) fn words(args: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut quoted = false;
    for c in args.chars() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
                word.push(c);
            }
            None if c == ' ' || c == '\t' => {
                if quoted || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                quoted = false;
            }
            None => {
                if c == '\'' || c == '"' {
                    quote = Some(c);
                    quoted = true;
                }
                word.push(c);
            }
        }
    }
    if quoted || !word.is_empty() {
        words.push(word);
    }
    words
}

/// `word` without its quotes (there are no `$` or `\` to read in it).
pub(super) fn unquote(word: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        if c != '\'' && c != '"' {
            out.push(c);
            continue;
        }
        loop {
            match chars.next() {
                Some(q) if q == c => break,
                Some(inner) => out.push(inner),
                None => return Err(format!("an unmatched {c} in `{word}`")),
            }
        }
    }
    Ok(out)
}

/// `<port>[/tcp|/udp|/sctp]` as the config keys it: `8080/tcp`.
pub(super) fn port(spec: &str) -> Option<String> {
    let (number, protocol) = spec.split_once('/').unwrap_or((spec, "tcp"));
    if !matches!(protocol, "tcp" | "udp" | "sctp")
        || number.is_empty()
        || number.len() > 5
        || number.starts_with('0')
        || !number.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let number: u32 = number.parse().ok()?;
    (number <= 65535).then(|| format!("{number}/{protocol}"))
}

/// A signal the engine accepts: a name, with or without `SIG`, or a number.
pub(super) fn signal(value: &str) -> bool {
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return !value.starts_with('0')
            && value.parse::<u32>().is_ok_and(|n| (1..=64).contains(&n));
    }
    let upper = value.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS.contains(&name)
}

/// ENTRYPOINT's or CMD's command: the exec form's strings, or the shell form
/// run by the shell.
pub(super) fn command(inst: &Instruction, args: &str) -> Result<Vec<String>, NotPlannable> {
    if args.is_empty() {
        return Err(inst.refuse("no command"));
    }
    if !args.starts_with('[') {
        return Ok(vec![SHELL[0].into(), SHELL[1].into(), args.into()]);
    }
    let values: Vec<serde_json::Value> = serde_json::from_str(args).map_err(|_| {
        inst.refuse(
            "it starts like a JSON array but is not one, which the engine reads its own way",
        )
    })?;
    let strings = values
        .into_iter()
        .map(|value| match value {
            serde_json::Value::String(s) => Ok(s),
            _ => Err(inst.refuse("a JSON array of other things than strings")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if strings.is_empty() {
        return Err(inst.refuse("an empty JSON array"));
    }
    Ok(strings)
}
