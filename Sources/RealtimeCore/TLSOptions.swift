public import NIOSSL
import NIOConcurrencyHelpers
import NIOCore

/// TLS settings shared by every transport (WebSocket and HTTP alike).
///
/// The default verifies the certificate chain against the system's trust roots and checks the
/// host name. Verification can only be turned off through
/// ``dangerouslyDisableCertificateVerification()``, whose name says what it does.
public struct TLSOptions: Sendable, Hashable {
    /// Where trusted root certificates come from.
    public struct TrustRoots: Sendable, Hashable {
        enum Base: Sendable, Hashable {
            case system
            case pem(String)
            case pemFile(String)
        }
        let base: Base

        /// The operating system's default trust store.
        public static let system = TrustRoots(base: .system)
        /// Only the certificates in this PEM text (one or more `BEGIN CERTIFICATE` blocks).
        public static func pem(_ text: String) -> TrustRoots { TrustRoots(base: .pem(text)) }
        /// Only the certificates in this PEM file.
        public static func pemFile(_ path: String) -> TrustRoots { TrustRoots(base: .pemFile(path)) }
    }

    /// A client certificate for mutual TLS.
    public struct ClientCertificate: Sendable, Hashable {
        enum Base: Sendable, Hashable {
            case pem(chain: String, privateKey: String)
            case files(chain: String, privateKey: String)
        }
        let base: Base

        /// A certificate chain (leaf first) and its private key, as PEM text.
        public static func pem(chain: String, privateKey: String) -> ClientCertificate {
            ClientCertificate(base: .pem(chain: chain, privateKey: privateKey))
        }
        /// A certificate chain file and a private key file, in PEM.
        public static func files(chain: String, privateKey: String) -> ClientCertificate {
            ClientCertificate(base: .files(chain: chain, privateKey: privateKey))
        }
    }

    /// The certificates that may sign the server's chain.
    public var trustRoots: TrustRoots
    /// Certificates trusted in addition to ``trustRoots`` (a private CA next to the public ones).
    public var additionalTrustRootsPEM: [String]
    /// The certificate presented when the server asks for one (mutual TLS).
    public var clientCertificate: ClientCertificate?
    /// Base64 SHA-256 digests of acceptable server SubjectPublicKeyInfo (as in HPKP `pin-sha256`).
    /// Empty: no pinning. Non-empty: the server's leaf key must match one of them. The check runs
    /// on the connection's own TLS handshake, after chain and host-name verification and before
    /// any request byte is sent.
    public var pinnedPublicKeySHA256: [String]
    /// The host name sent in SNI and checked against the certificate; defaults to the URL's host.
    /// An IP address is never sent as SNI (TLS forbids it); it is still checked against the
    /// certificate's IP subject alternative names.
    public var serverName: String?
    var verificationDisabled: Bool
    /// How long a close we start waits for the peer's close_notify after sending ours. By default
    /// (nil) it does not wait: the client has nothing more to read once it closes, and a server
    /// busy writing a response (an event stream behind nginx) never answers, so waiting only
    /// delays the end (swift-nio-ssl's own default is 5 s). TLS allows the closer to close the
    /// connection without the reply (RFC 8446, section 6.1), as browsers do. A test sets it far
    /// beyond any scheduling delay, so waiting for it cannot pass for load.
    package var shutdownTimeout: Duration?

    /// Makes options; every parameter is the property of the same name.
    public init(
        trustRoots: TrustRoots = .system,
        additionalTrustRootsPEM: [String] = [],
        clientCertificate: ClientCertificate? = nil,
        pinnedPublicKeySHA256: [String] = [],
        serverName: String? = nil
    ) {
        self.trustRoots = trustRoots
        self.additionalTrustRootsPEM = additionalTrustRootsPEM
        self.clientCertificate = clientCertificate
        self.pinnedPublicKeySHA256 = pinnedPublicKeySHA256
        self.serverName = serverName
        self.verificationDisabled = false
    }

    /// Full verification with the system trust roots.
    public static var `default`: TLSOptions { TLSOptions() }

    /// Accepts any certificate from any host. Only for development against a server whose
    /// certificate you cannot fix: a connection made with this can be intercepted by anyone on the path.
    public static func dangerouslyDisableCertificateVerification() -> TLSOptions {
        var options = TLSOptions()
        options.verificationDisabled = true
        return options
    }

    /// Whether certificate verification is off.
    public var isVerificationDisabled: Bool { verificationDisabled }

    /// The swift-nio-ssl configuration these options describe.
    public func makeTLSConfiguration() throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateVerification = verificationDisabled ? .none : .fullVerification
        configuration.shutdownTimeout = shutdownTimeout.map { TimeAmount($0) } ?? .zero
        do {
            switch trustRoots.base {
            case .system:
                configuration.trustRoots = .default
            case .pem(let text):
                configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(text.utf8)))
            case .pemFile(let path):
                configuration.trustRoots = .file(path)
            }
            if !additionalTrustRootsPEM.isEmpty {
                configuration.additionalTrustRoots = try additionalTrustRootsPEM.map {
                    .certificates(try NIOSSLCertificate.fromPEMBytes(Array($0.utf8)))
                }
            }
            switch clientCertificate?.base {
            case .none:
                break
            case .pem(let chain, let key):
                configuration.certificateChain = try NIOSSLCertificate.fromPEMBytes(Array(chain.utf8)).map { .certificate($0) }
                configuration.privateKey = .privateKey(try NIOSSLPrivateKey(bytes: Array(key.utf8), format: .pem))
            case .files(let chain, let key):
                configuration.certificateChain = try NIOSSLCertificate.fromPEMFile(chain).map { .certificate($0) }
                configuration.privateKey = .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
            }
        } catch {
            throw RealtimeError(.tlsFailure, "could not load the TLS certificates or key", underlying: error)
        }
        return configuration
    }
}

extension TLSOptions {
    /// The swift-nio-ssl context these options describe, made once per distinct options and shared:
    /// loading trust roots (the system store is hundreds of certificates) costs far more than a
    /// handshake, and every reconnect would pay it again. At most 64 contexts are kept; files named
    /// by the options are read when a context is first made.
    func sslContext() throws -> NIOSSLContext {
        if let cached = TLSContextCache.contexts.withLockedValue({ $0[self] }) { return cached }
        let context: NIOSSLContext
        do {
            context = try NIOSSLContext(configuration: try makeTLSConfiguration())
        } catch let error as RealtimeError {
            throw error
        } catch {
            throw RealtimeError(.tlsFailure, "could not build the TLS context", underlying: error)
        }
        TLSContextCache.contexts.withLockedValue { contexts in
            if contexts.count >= 64 { contexts.removeAll() }
            contexts[self] = context
        }
        return context
    }
}

enum TLSContextCache {
    static let contexts = NIOLockedValueBox<[TLSOptions: NIOSSLContext]>([:])
}
