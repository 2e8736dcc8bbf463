//! Service-account tokens: issued for a service account (`TokenRequest`, and by the Docker kubelet for
//! its containers), they authenticate as that account while it exists with the UID it had at issue and
//! until they expire. A token is shaped like a JWT (header, claims, signature, each base64url) so tools
//! that decode one see the usual claims; the server accepts only tokens it issued and has not forgotten.

use base64::Engine as _;
use serde_json::{Value, json};

use super::{Result, Store};
use crate::lock::RwLockExt as _;
use crate::meta;
use crate::resource::GroupResource;

/// Who a token stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenIdentity {
    /// The service account's namespace.
    pub namespace: String,
    /// The service account's name.
    pub service_account: String,
    /// The service account's UID when the token was issued.
    pub uid: String,
    /// When the token stops working (Unix seconds); `None` while its holder keeps it.
    pub expires: Option<i64>,
}

/// What a token is asked for.
#[derive(Clone, Debug, Default)]
pub struct TokenOptions {
    /// Its lifetime; `None` for a token that lasts until it is forgotten.
    pub expiration_seconds: Option<i64>,
    /// The audiences written into it.
    pub audiences: Vec<String>,
}

/// An issued token.
#[derive(Clone, Debug)]
pub struct IssuedToken {
    /// The bearer token.
    pub token: String,
    /// When it expires (Unix seconds), if it does.
    pub expires: Option<i64>,
}

/// The issuer named in tokens, as k3s names its own.
const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Store {
    /// Issues a token for the service account `namespace/name`; `NotFound` when it does not exist.
    pub fn issue_token(
        &self,
        namespace: &str,
        name: &str,
        opts: &TokenOptions,
    ) -> Result<IssuedToken> {
        let sa = self.get(
            &GroupResource::new("", "serviceaccounts"),
            Some(namespace),
            name,
        )?;
        let uid = meta::str_at(&sa, "/metadata/uid")
            .unwrap_or_default()
            .to_string();
        let now = jiff::Timestamp::now().as_second();
        let expires = opts.expiration_seconds.map(|s| now + s);
        let mut claims = json!({
            "aud": opts.audiences,
            "iat": now,
            "nbf": now,
            "iss": ISSUER,
            "jti": meta::new_uid(),
            "sub": format!("system:serviceaccount:{namespace}:{name}"),
            "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
        });
        if let (Some(e), Value::Object(m)) = (expires, &mut claims) {
            m.insert("exp".into(), json!(e));
        }
        let mut signature = [0u8; 32];
        meta::random_bytes(&mut signature);
        let token = format!(
            "{}.{}.{}",
            b64(br#"{"alg":"RS256","kid":"kube-sim"}"#),
            b64(claims.to_string().as_bytes()),
            b64(&signature)
        );
        let identity = TokenIdentity {
            namespace: namespace.to_string(),
            service_account: name.to_string(),
            uid,
            expires,
        };
        let mut tokens = self.shared.tokens.write_unpoisoned();
        tokens.retain(|_, t| t.expires.is_none_or(|e| e > now));
        tokens.insert(token.clone(), identity);
        Ok(IssuedToken { token, expires })
    }

    /// Revokes a token issued with [`Store::issue_token`].
    pub fn forget_token(&self, token: &str) {
        self.shared.tokens.write_unpoisoned().remove(token);
    }

    /// The identity of a token that still authenticates: issued here, not expired, and its service
    /// account still there with the same UID.
    pub fn token_identity(&self, token: &str) -> Option<TokenIdentity> {
        let identity = self.shared.tokens.read_unpoisoned().get(token).cloned()?;
        if identity
            .expires
            .is_some_and(|e| e <= jiff::Timestamp::now().as_second())
        {
            return None;
        }
        let sa = self
            .get(
                &GroupResource::new("", "serviceaccounts"),
                Some(&identity.namespace),
                &identity.service_account,
            )
            .ok()?;
        (meta::str_at(&sa, "/metadata/uid").unwrap_or_default() == identity.uid).then_some(identity)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::{DeleteOptions, StoreConfig, WriteOptions};

    fn account(store: &Store) {
        store
            .create(
                &GroupResource::new("", "serviceaccounts"),
                Some("default"),
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}}),
                &WriteOptions::manager("test"),
            )
            .unwrap();
    }

    #[test]
    fn a_token_lasts_while_its_account_does_and_until_it_expires() {
        let store = Store::new(StoreConfig { history: 100 });
        assert!(
            store
                .issue_token("default", "robot", &TokenOptions::default())
                .is_err(),
            "no account, no token"
        );
        account(&store);
        let lasting = store
            .issue_token("default", "robot", &TokenOptions::default())
            .unwrap();
        let identity = store.token_identity(&lasting.token).unwrap();
        assert_eq!(
            (
                identity.namespace.as_str(),
                identity.service_account.as_str()
            ),
            ("default", "robot")
        );
        let expired = store
            .issue_token(
                "default",
                "robot",
                &TokenOptions {
                    expiration_seconds: Some(-1),
                    ..TokenOptions::default()
                },
            )
            .unwrap();
        assert_eq!(store.token_identity(&expired.token), None);
        assert_eq!(store.token_identity("made-up"), None);

        // A new account of the same name is another account.
        store
            .delete(
                &GroupResource::new("", "serviceaccounts"),
                Some("default"),
                "robot",
                &DeleteOptions::default(),
            )
            .unwrap();
        assert_eq!(store.token_identity(&lasting.token), None);
        account(&store);
        assert_eq!(store.token_identity(&lasting.token), None);
        store.forget_token(&lasting.token);
    }
}
