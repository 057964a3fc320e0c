#if canImport(FoundationEssentials)
import FoundationEssentials
#endif
import Foundation
public import NIOSSL

/// Certificates made with the `openssl` command for TLS tests: a CA, a server certificate it signed
/// for 127.0.0.1 and localhost, a self-signed one for the same names, one the CA signed for a wrong
/// host, and a client certificate for mutual TLS.
public struct TestCertificates: Sendable {
    /// A certificate and its private key, as PEM files.
    public struct Pair: Sendable {
        /// The certificate's PEM file.
        public let certificatePath: String
        /// The private key's PEM file.
        public let keyPath: String
        /// The certificate as PEM text.
        public var certificatePEM: String { (try? String(contentsOfFile: certificatePath, encoding: .utf8)) ?? "" }
        /// The private key as PEM text.
        public var keyPEM: String { (try? String(contentsOfFile: keyPath, encoding: .utf8)) ?? "" }

        /// A server's TLS configuration presenting this certificate and key.
        public func serverConfiguration() throws -> TLSConfiguration {
            TLSConfiguration.makeServerConfiguration(
                certificateChain: try NIOSSLCertificate.fromPEMFile(certificatePath).map { .certificate($0) },
                privateKey: .privateKey(try NIOSSLPrivateKey(file: keyPath, format: .pem)))
        }
    }

    /// The folder holding the files.
    public let directory: String
    /// The test certificate authority.
    public let ca: Pair
    /// A server certificate for `localhost` and 127.0.0.1, signed by ``ca``.
    public let server: Pair
    /// A self-signed server certificate (no client trusts it).
    public let selfSigned: Pair
    /// A certificate signed by ``ca`` for another host name.
    public let wrongHost: Pair
    /// Another certificate authority, unrelated to ``ca``.
    public let otherCA: Pair
    /// A client certificate signed by ``ca`` (mutual TLS).
    public let client: Pair

    /// ``generate()`` on a thread of its own (it runs `openssl` nine times and waits for each; see
    /// ``BlockingWork``), for async callers.
    public static func make() async throws -> TestCertificates {
        try await BlockingWork.run { try generate() }
    }

    /// Generates everything into a fresh temporary directory. Fails with instructions when
    /// `openssl` is not installed.
    public static func generate() throws -> TestCertificates {
        let directory = NSTemporaryDirectory() + "realtime-certs-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        func path(_ name: String) -> String { directory + "/" + name }
        let ext = path("san.ext")
        try "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n".write(toFile: ext, atomically: true, encoding: .utf8)
        let wrongExt = path("wrong.ext")
        try "subjectAltName=DNS:wrong.example\nbasicConstraints=CA:FALSE\n".write(toFile: wrongExt, atomically: true, encoding: .utf8)
        let clientExt = path("client.ext")
        try "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n".write(toFile: clientExt, atomically: true, encoding: .utf8)

        func makeCA(_ name: String, subject: String) throws {
            try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                         "-keyout", path("\(name).key"), "-out", path("\(name).pem"), "-days", "2",
                         "-subj", subject, "-addext", "basicConstraints=critical,CA:TRUE",
                         "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        }
        func makeSigned(_ name: String, cn: String, ext: String, ca: String) throws {
            try openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                         "-keyout", path("\(name).key"), "-out", path("\(name).csr"), "-subj", "/CN=\(cn)"])
            try openssl(["x509", "-req", "-in", path("\(name).csr"), "-CA", path("\(ca).pem"), "-CAkey", path("\(ca).key"),
                         "-CAcreateserial", "-out", path("\(name).pem"), "-days", "2", "-extfile", ext])
        }
        try makeCA("ca", subject: "/CN=swift-realtime test CA")
        try makeCA("other-ca", subject: "/CN=swift-realtime other CA")
        try makeSigned("server", cn: "localhost", ext: ext, ca: "ca")
        try makeSigned("wrong-host", cn: "wrong.example", ext: wrongExt, ca: "ca")
        try makeSigned("client", cn: "realtime-client", ext: clientExt, ca: "ca")
        try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-keyout", path("self-signed.key"), "-out", path("self-signed.pem"), "-days", "2",
                     "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        func pair(_ name: String) -> Pair { Pair(certificatePath: path("\(name).pem"), keyPath: path("\(name).key")) }
        return TestCertificates(
            directory: directory, ca: pair("ca"), server: pair("server"), selfSigned: pair("self-signed"),
            wrongHost: pair("wrong-host"), otherCA: pair("other-ca"), client: pair("client"))
    }

    /// Removes the directory.
    public func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    static func openssl(_ arguments: [String]) throws {
        let candidates = ["/usr/bin/openssl", "/usr/local/bin/openssl", "/bin/openssl"]
        guard let executable = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw LoopbackServerError(
                message: "openssl is not installed; run Scripts/test.sh (it installs it) or `apt-get install openssl`")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = Pipe()
        try process.run()
        let message = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw LoopbackServerError(
                message: "openssl \(arguments.first ?? "") failed: \(String(decoding: message, as: UTF8.self))")
        }
    }
}
