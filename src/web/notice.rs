//! The notice shown after an action (`?notice=`): only a text this server wrote is shown.
//!
//! An action's redirect carries what happened ("retry: 2 of 3 jobs; 1 refused, first: …") in the URL,
//! so a plain `?notice=` would let anyone send an operator a link that writes their own words into the
//! dashboard's official banner. The redirect signs the text instead (HMAC-SHA256 under a key made when
//! the dashboard starts, from ring, the crypto rustls already builds), and a page shows a notice only
//! when its signature holds. A restart makes old notices disappear, which is all they are for.

use std::sync::Arc;

use ring::hmac;
use subtle::ConstantTimeEq;

/// Bytes of the tag kept: 128 bits is beyond guessing, and keeps URLs short.
const TAG_BYTES: usize = 16;

/// The key notices are signed with.
#[derive(Clone)]
pub(super) struct NoticeKey(Arc<hmac::Key>);

impl std::fmt::Debug for NoticeKey {
    /// Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NoticeKey(***)")
    }
}

impl NoticeKey {
    /// A new random key.
    pub(super) fn random() -> Self {
        Self(Arc::new(hmac::Key::new(
            hmac::HMAC_SHA256,
            &rand::random::<[u8; 32]>(),
        )))
    }

    fn tag(&self, text: &str) -> [u8; TAG_BYTES] {
        let full = hmac::sign(&self.0, text.as_bytes());
        let mut tag = [0; TAG_BYTES];
        tag.copy_from_slice(&full.as_ref()[..TAG_BYTES]);
        tag
    }

    /// `text` with its signature in front: `TAG.text`, the value of a `notice` parameter.
    pub(super) fn seal(&self, text: &str) -> String {
        let hex: String = self.tag(text).iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}.{text}")
    }

    /// The text of a `notice` parameter if this key signed it.
    pub(super) fn open<'a>(&self, sealed: &'a str) -> Option<&'a str> {
        let (hex, text) = sealed.split_once('.')?;
        if hex.len() != 2 * TAG_BYTES || !hex.is_ascii() {
            return None;
        }
        let mut given = [0u8; TAG_BYTES];
        for (i, b) in given.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        bool::from(given.ct_eq(&self.tag(text))).then_some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_this_key_sealed_opens() {
        let key = NoticeKey::random();
        let sealed = key.seal("retry: 2 of 3 jobs. Done");
        assert_eq!(key.open(&sealed), Some("retry: 2 of 3 jobs. Done"));
        assert_eq!(key.open("retry: 2 of 3 jobs"), None);
        assert_eq!(key.open(&sealed.replace("2 of 3", "3 of 3")), None);
        assert_eq!(NoticeKey::random().open(&sealed), None, "another key");
        let forged = format!("{}.Database wiped, call 555-0100", "0".repeat(32));
        assert_eq!(key.open(&forged), None);
        assert_eq!(key.open("é.x"), None);
    }
}
