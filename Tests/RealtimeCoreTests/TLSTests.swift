import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOSSL
@testable import RealtimeCore
import RealtimeTesting
import Foundation
import Testing

/// Real TLS on loopback with certificates made by `openssl` for each run.
@Suite(.serialized, .timeLimit(.minutes(2))) final class TLSTests {
    let certificates: TestCertificates

    init() async throws {
        certificates = try await TestCertificates.make()
    }

    deinit { certificates.remove() }

    func serverTLS(
        _ pair: TestCertificates.Pair, requireClientCertificate: Bool = false, counter: TLSHandshakeCounter? = nil
    ) throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(pair.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: pair.keyPath, format: .pem)))
        if requireClientCertificate {
            configuration.certificateVerification = .noHostnameVerification
            configuration.trustRoots = .file(certificates.ca.certificatePath)
        }
        counter?.install(on: &configuration)
        return configuration
    }

    /// The connect timeout (TCP, TLS handshake and upgrade) is 30 s: beside a whole parallel suite
    /// and CPU burners, a 10 s one ran out once before the handshake was done.
    func echoOnce(_ url: String, _ tls: TLSOptions) async throws -> String? {
        let reply = NIOLockedValueBox<String?>(nil)
        try await WebSocketTransport.connect(to: url, configuration: WebSocketConfiguration(connectTimeout: .seconds(30), tls: tls)) { connection in
            try await connection.send(text: "over tls")
            var iterator = connection.inbound.makeAsyncIterator()
            if case .text(let text) = try await iterator.next() { reply.withLockedValue { $0 = text } }
            try await connection.close()
        }
        return reply.withLockedValue { $0 }
    }

    /// By host name (sent as SNI) and by IP address (no SNI; the certificate's IP SAN is checked).
    @Test(arguments: [true, false]) func wssWorksWithTheCustomCA(byName: Bool) async throws {
        let server = try await WebSocketEchoServer.start(tls: try serverTLS(certificates.server))
        defer { Task { await server.stop() } }
        let url = byName ? server.webSocketBaseURL.replacingLocalhost() : server.webSocketBaseURL
        #expect(url.hasPrefix(byName ? "wss://localhost:" : "wss://127.0.0.1:"))
        let reply = try await echoOnce(url, TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath)))
        #expect(reply == "over tls")
    }

    @Test func selfSignedIsRejectedByDefault() async throws {
        let server = try await WebSocketEchoServer.start(tls: try serverTLS(certificates.selfSigned))
        defer { Task { await server.stop() } }
        let error = await #expect(throws: RealtimeError.self) { _ = try await echoOnce(server.webSocketBaseURL, .default) }
        #expect(error?.code == .tlsFailure)
        // ...and accepted only through the dangerous option.
        let reply = try await echoOnce(server.webSocketBaseURL, .dangerouslyDisableCertificateVerification())
        #expect(reply == "over tls")
    }

    @Test func wrongHostIsRejectedEvenWithTheRightCA() async throws {
        let server = try await WebSocketEchoServer.start(tls: try serverTLS(certificates.wrongHost))
        defer { Task { await server.stop() } }
        let error = await #expect(throws: RealtimeError.self) {
            _ = try await echoOnce(server.webSocketBaseURL, TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath)))
        }
        #expect(error?.code == .tlsFailure)
    }

    /// The pin is checked on the connection's own handshake: a pinned key is accepted with exactly
    /// one handshake; a CA-valid certificate with another key is refused before anything is sent.
    @Test func pinningOnTheSameConnectionForWSS() async throws {
        let counter = TLSHandshakeCounter()
        let server = try await WebSocketEchoServer.start(tls: try serverTLS(certificates.server, counter: counter))
        defer { Task { await server.stop() } }
        let (rightPin, otherPin) = try pins()
        let ca = TLSOptions.TrustRoots.pemFile(certificates.ca.certificatePath)
        let reply = try await echoOnce(server.webSocketBaseURL, TLSOptions(trustRoots: ca, pinnedPublicKeySHA256: [otherPin, rightPin]))
        #expect(reply == "over tls")
        #expect(counter.count == 1)
        let error = await #expect(throws: RealtimeError.self) {
            _ = try await echoOnce(server.webSocketBaseURL, TLSOptions(trustRoots: ca, pinnedPublicKeySHA256: [otherPin]))
        }
        #expect(error?.code == .certificatePinMismatch)
        #expect(counter.count == 2)
    }

    @Test func pinningOnTheSameConnectionForHTTPS() async throws {
        let counter = TLSHandshakeCounter()
        let server = try await ScriptedHTTPServer.start(tls: try serverTLS(certificates.server, counter: counter))
        defer { Task { await server.stop() } }
        server.route("/hello") { _ in .text("hi") }
        let (rightPin, otherPin) = try pins()
        let ca = TLSOptions.TrustRoots.pemFile(certificates.ca.certificatePath)
        let (head, body) = try await HTTPTransport.execute(
            HTTPRequestSpec(url: server.baseURL + "/hello", tls: TLSOptions(trustRoots: ca, pinnedPublicKeySHA256: [rightPin])))
        #expect(head.status == .ok)
        #expect(String(buffer: body) == "hi")
        #expect(counter.count == 1)
        let error = await #expect(throws: RealtimeError.self) {
            _ = try await HTTPTransport.execute(
                HTTPRequestSpec(url: server.baseURL + "/hello", tls: TLSOptions(trustRoots: ca, pinnedPublicKeySHA256: [otherPin])))
        }
        #expect(error?.code == .certificatePinMismatch, "\(String(describing: error))")
        #expect(counter.count == 2)
        #expect(server.requests(to: "/hello").count == 1, "the refused connection carried no request")
    }

    func pins() throws -> (right: String, other: String) {
        let right = try TLSPinning.spkiSHA256(of: try NIOSSLCertificate.fromPEMFile(certificates.server.certificatePath)[0])
        let other = try TLSPinning.spkiSHA256(of: try NIOSSLCertificate.fromPEMFile(certificates.otherCA.certificatePath)[0])
        #expect(right != other)
        return (right, other)
    }

    @Test func mutualTLSPresentsTheClientCertificate() async throws {
        let server = try await WebSocketEchoServer.start(tls: try serverTLS(certificates.server, requireClientCertificate: true))
        defer { Task { await server.stop() } }
        let ca = TLSOptions.TrustRoots.pemFile(certificates.ca.certificatePath)
        let withCertificate = TLSOptions(
            trustRoots: ca,
            clientCertificate: .files(chain: certificates.client.certificatePath, privateKey: certificates.client.keyPath))
        #expect(try await echoOnce(server.webSocketBaseURL, withCertificate) == "over tls")
        await #expect(throws: (any Error).self) { _ = try await echoOnce(server.webSocketBaseURL, TLSOptions(trustRoots: ca)) }
    }

    @Test func httpsUsesTheSameOptions() async throws {
        let server = try await ScriptedHTTPServer.start(tls: try serverTLS(certificates.server))
        defer { Task { await server.stop() } }
        server.route("/hello") { _ in .text("hi") }
        let ok = HTTPRequestSpec(url: server.baseURL + "/hello", tls: TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath)))
        let (head, body) = try await HTTPTransport.execute(ok)
        #expect(head.status == .ok)
        #expect(String(buffer: body) == "hi")
    }

    /// A certificate failure is reported at once, not after connection retries until the deadline.
    @Test func aSelfSignedHTTPSServerFailsAtOnceWithTLSFailure() async throws {
        let server = try await ScriptedHTTPServer.start(tls: try serverTLS(certificates.selfSigned))
        defer { Task { await server.stop() } }
        server.route("/hello") { _ in .text("hi") }
        let started = ContinuousClock.now
        let error = await #expect(throws: RealtimeError.self) {
            _ = try await HTTPTransport.execute(HTTPRequestSpec(url: server.baseURL + "/hello", headTimeout: .seconds(30)))
        }
        #expect(error?.code == .tlsFailure, "\(String(describing: error))")
        // Behaviour, not speed: with retries until the deadline this took the whole 30 s.
        #expect(ContinuousClock.now - started < .seconds(15))
    }
}

extension String {
    /// The same URL by host name (the test certificates cover `localhost` and `127.0.0.1`).
    func replacingLocalhost() -> String {
        var copy = self
        if let range = copy.range(of: "127.0.0.1") { copy.replaceSubrange(range, with: "localhost") }
        return copy
    }
}
