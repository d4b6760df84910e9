//! A small Chrome DevTools Protocol client for the dashboard's end-to-end test: Chromium headless,
//! spoken to over `--remote-debugging-pipe` (JSON messages ended by NUL on fds 3 and 4, here two FIFOs
//! the shell wires up), so no WebDriver server and no WebSocket are needed.
//!
//! The Chromium used is `JOBQ_CHROMIUM` (set by `scripts/test.sh` from `scripts/ensure-chromium.sh`),
//! else `chromium` on PATH.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// How long one protocol call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Browser {
    child: Child,
    commands: std::fs::File,
    replies: Receiver<Value>,
    next_id: u64,
    session: String,
}

fn chromium() -> String {
    if let Ok(c) = std::env::var("JOBQ_CHROMIUM")
        && !c.is_empty()
    {
        return c;
    }
    let found = Command::new("sh")
        .args(["-c", "command -v chromium || command -v chromium-browser"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    found.expect(
        "no Chromium: run scripts/ensure-chromium.sh (scripts/test.sh does) or set JOBQ_CHROMIUM",
    )
}

impl Browser {
    /// Starts headless Chromium with a fresh profile in `dir` and opens one blank page.
    pub fn launch(dir: &Path) -> Browser {
        let (to_chrome, from_chrome) = (dir.join("cdp-in"), dir.join("cdp-out"));
        for fifo in [&to_chrome, &from_chrome] {
            let ok = Command::new("mkfifo").arg(fifo).status().unwrap().success();
            assert!(ok, "mkfifo {}", fifo.display());
        }
        let log = std::fs::File::create(dir.join("chromium.log")).unwrap();
        let child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<"$CDP_IN" 4>"$CDP_OUT""#)
            .arg(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-pipe",
                "--window-size=1280,900",
            ])
            .arg(format!("--user-data-dir={}", dir.join("profile").display()))
            .env("CDP_IN", &to_chrome)
            .env("CDP_OUT", &from_chrome)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        // The shell opens fd 3 (reading) first, then fd 4 (writing): open ours in the same order.
        let commands = std::fs::OpenOptions::new()
            .write(true)
            .open(&to_chrome)
            .unwrap();
        let out = std::fs::File::open(&from_chrome).unwrap();
        let (tx, replies) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut buf = Vec::new();
            while r.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                buf.pop();
                if let Ok(v) = serde_json::from_slice::<Value>(&buf)
                    && tx.send(v).is_err()
                {
                    return;
                }
                buf.clear();
            }
        });
        let mut b = Browser {
            child,
            commands,
            replies,
            next_id: 0,
            session: String::new(),
        };
        let target = b.send(None, "Target.createTarget", json!({ "url": "about:blank" }));
        let attached = b.send(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target["targetId"], "flatten": true }),
        );
        b.session = attached["sessionId"].as_str().unwrap().to_string();
        b.call("Page.enable", json!({}));
        b.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false }),
        );
        b
    }

    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.try_send(session, method, params)
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// A call; its error (`{"code": …, "message": …}`) as `Err`.
    fn try_send(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).unwrap();
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.replies.recv_timeout(left) {
                Ok(v) if v["id"] == json!(id) => {
                    return match v.get("error") {
                        Some(e) => Err(e.clone()),
                        None => Ok(v["result"].clone()),
                    };
                }
                Ok(_) => {} // an event, or another call's late reply
                Err(RecvTimeoutError::Timeout) => {
                    panic!("{method}: no reply within {CALL_TIMEOUT:?}")
                }
                Err(RecvTimeoutError::Disconnected) => panic!("{method}: Chromium exited"),
            }
        }
    }

    /// A call on the page.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(Some(&session), method, params)
    }

    /// Evaluates `expr` in the page and returns its value. A thrown exception fails the test.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expr, "returnByValue": true, "awaitPromise": true }),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{expr}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Waits until `expr` is true in the page. A page that is being replaced cannot answer; that
    /// counts as not yet.
    pub fn wait_for(&mut self, what: &str, expr: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let session = self.session.clone();
            let r = self.try_send(
                Some(&session),
                "Runtime.evaluate",
                json!({ "expression": format!("!!({expr})"), "returnByValue": true }),
            );
            if r.is_ok_and(|r| r["result"]["value"] == json!(true)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let page = self.eval("location.href + '\\n' + document.body.innerText");
        panic!("timed out waiting for {what} ({expr}); page: {page}");
    }

    /// Runs `action` (a navigation: a click, a form submit) and waits for the new page to load. The
    /// action runs from a timer, so the evaluation returns before the page it runs in goes away.
    pub fn navigate_by(&mut self, action: &str) {
        self.eval("window.__jobq_old_page = true");
        self.eval(&format!("setTimeout(() => {{ {action} }}, 0)"));
        self.wait_for(
            "the next page",
            "!window.__jobq_old_page && document.readyState === 'complete'",
        );
    }

    /// Opens `url` and waits for it to load.
    pub fn goto(&mut self, url: &str) {
        self.navigate_by(&format!("location.href = {}", json!(url)));
    }

    /// Saves a PNG of the page to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let r = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the end-to-end test saves its screenshots: `target/screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("screenshots")
}
