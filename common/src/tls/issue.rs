//! Issuing certificates: a cluster CA and the certificates it signs for the
//! OM, the datanodes and the sidecars (used by the operator, `ozone admin
//! cert` and tests). Keys are ECDSA P-256.

use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};

use super::{CA_FILE, CERT_FILE, KEY_FILE, TlsError};

/// Clock skew a new certificate allows for.
const BACKDATE: Duration = Duration::from_secs(300);

/// A certificate authority: its certificate and the key that signs.
pub struct Ca {
    name: String,
    cert_pem: String,
    key: KeyPair,
}

/// A certificate issued by a [`Ca`].
pub struct Issued {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PEM (PKCS#8).
    pub key_pem: String,
    /// When it expires.
    pub not_after: SystemTime,
}

fn ca_params(name: &str) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p
}

fn random_serial() -> SerialNumber {
    let mut b: [u8; 16] = rand::random();
    b[0] &= 0x7f; // positive
    SerialNumber::from_slice(&b)
}

impl Ca {
    /// A new self-signed CA named `name`, valid for `valid`.
    pub fn new(name: &str, valid: Duration) -> Result<Ca, TlsError> {
        let key = KeyPair::generate()?;
        let mut p = ca_params(name);
        let now = SystemTime::now();
        p.not_before = (now - BACKDATE).into();
        p.not_after = (now + valid).into();
        p.serial_number = Some(random_serial());
        let cert = p.self_signed(&key)?;
        Ok(Ca {
            name: name.to_string(),
            cert_pem: cert.pem(),
            key,
        })
    }

    /// The CA named `name` whose certificate and key were saved as PEM
    /// (by [`Ca::cert_pem`] and [`Ca::key_pem`]).
    pub fn from_pem(name: &str, cert_pem: &str, key_pem: &str) -> Result<Ca, TlsError> {
        Ok(Ca {
            name: name.to_string(),
            cert_pem: cert_pem.to_string(),
            key: KeyPair::from_pem(key_pem)?,
        })
    }

    /// The CA's certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key, PEM.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// A certificate for `names` (DNS names or IP addresses, the first also
    /// its common name), for servers and clients, valid for `valid`.
    pub fn issue(&self, names: &[String], valid: Duration) -> Result<Issued, TlsError> {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(names.to_vec())?;
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            names.first().map(String::as_str).unwrap_or("ozone"),
        );
        p.distinguished_name = dn;
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let now = SystemTime::now();
        let not_after = now + valid;
        p.not_before = (now - BACKDATE).into();
        p.not_after = not_after.into();
        p.serial_number = Some(random_serial());
        p.use_authority_key_identifier_extension = true;
        let issuer = Issuer::new(ca_params(&self.name), &self.key);
        let cert = p.signed_by(&key, &issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after,
        })
    }
}

/// Writes a certificate directory: `ca.crt`, and `tls.crt` and `tls.key`
/// when `issued` is given (else the ones there are kept). The files go into
/// a new subdirectory that a `..data` symlink is swapped to at once, the
/// layout the kubelet gives a mounted Secret, so a reader never sees a new
/// certificate with an old key. The key is readable by its owner only.
pub fn write_dir(dir: &Path, ca_pem: &str, issued: Option<&Issued>) -> std::io::Result<()> {
    use std::os::unix::fs::{PermissionsExt, symlink};
    std::fs::create_dir_all(dir)?;
    let stamp = format!(
        "..{}.{}",
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
        std::process::id()
    );
    let new = dir.join(&stamp);
    std::fs::create_dir(&new)?;
    let put = |name: &str, text: &[u8], mode: u32| -> std::io::Result<()> {
        std::fs::write(new.join(name), text)?;
        std::fs::set_permissions(new.join(name), std::fs::Permissions::from_mode(mode))
    };
    match issued {
        Some(i) => {
            put(KEY_FILE, i.key_pem.as_bytes(), 0o600)?;
            put(CERT_FILE, i.cert_pem.as_bytes(), 0o644)?;
        }
        None => {
            for (name, mode) in [(KEY_FILE, 0o600), (CERT_FILE, 0o644)] {
                match std::fs::read(dir.join(name)) {
                    Ok(b) => put(name, &b, mode)?,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    put(CA_FILE, ca_pem.as_bytes(), 0o644)?;
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    symlink(&stamp, &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))?;
    for name in [CA_FILE, CERT_FILE, KEY_FILE] {
        let link = dir.join(name);
        let target = Path::new("..data").join(name);
        if std::fs::read_link(&link).ok().as_deref() != Some(target.as_path()) {
            let tmp = dir.join(format!(".{name}.tmp"));
            let _ = std::fs::remove_file(&tmp);
            symlink(&target, &tmp)?;
            std::fs::rename(&tmp, &link)?;
        }
    }
    if let Some(old) = old.filter(|o| o.as_os_str() != stamp.as_str()) {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_saved_and_loaded_issues_certificates_its_bundle_trusts() {
        let ca = Ca::new("ozone-ca test", Duration::from_secs(3600)).unwrap();
        let again = Ca::from_pem("ozone-ca test", ca.cert_pem(), &ca.key_pem()).unwrap();
        let leaf = again
            .issue(
                &["om.ozone.svc".into(), "127.0.0.1".into()],
                Duration::from_secs(60),
            )
            .unwrap();
        let d = tempfile::tempdir().unwrap();
        write_dir(d.path(), ca.cert_pem(), Some(&leaf)).unwrap();
        // The directory loads as a server's: chain and key agree.
        let tls = super::super::Tls::load(d.path(), true).unwrap();
        assert!(tls.server_config().is_some());
        let mode = std::fs::metadata(d.path().join(KEY_FILE)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
        assert!(leaf.not_after > SystemTime::now() + Duration::from_secs(50));
    }
}
