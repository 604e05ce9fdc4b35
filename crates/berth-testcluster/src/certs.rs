//! The cluster's PKI: a CA, the API server's serving certificate, the ServiceAccount token
//! signing key. Fresh for every cluster, so nothing is shared between test runs.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// PEM texts (and the CA in DER, for kube's `Config::root_cert`).
pub(crate) struct Pki {
    pub(crate) ca_pem: String,
    pub(crate) ca_der: Vec<u8>,
    pub(crate) serving_cert_pem: String,
    pub(crate) serving_key_pem: String,
    pub(crate) sa_key_pem: String,
    pub(crate) sa_pub_pem: String,
}

/// Names the serving certificate is valid for. kube-rs (rustls) verifies an IP address only
/// against an IP SAN, so `127.0.0.1` must be there; the in-cluster names and the first
/// service IP are what a real cluster's certificate carries.
const SERVING_NAMES: [&str; 7] = [
    "127.0.0.1",
    "::1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "10.0.0.1",
];

pub(crate) fn generate() -> Result<Pki, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "berth-testcluster-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, &ca_key);

    let serving_key = KeyPair::generate()?;
    let mut serving = CertificateParams::new(SERVING_NAMES.map(String::from).to_vec())?;
    serving
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    serving.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = serving.signed_by(&serving_key, &issuer)?;

    // ECDSA P-256: the API server signs ServiceAccount tokens with ES256.
    let sa_key = KeyPair::generate()?;
    Ok(Pki {
        ca_pem: ca.pem(),
        ca_der: ca.der().to_vec(),
        serving_cert_pem: serving_cert.pem(),
        serving_key_pem: serving_key.serialize_pem(),
        sa_key_pem: sa_key.serialize_pem(),
        sa_pub_pem: sa_key.public_key_pem(),
    })
}
