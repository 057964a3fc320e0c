import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOSSL
@testable import RealtimeCore
import RealtimeTesting
import Foundation
import Testing

/// Real TLS on loopback with certificates made by `openssl` for each run.
@Suite(.serialized, .timeLimit(.minutes(2))) struct TLSTests {
    let certificates: TestCertificates

    init() throws {
        certificates = try TestCertificates.generate()
    }

    func serverTLS(_ pair: TestCertificates.Pair, requireClientCertificate: Bool = false) throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(pair.certificatePath).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: pair.keyPath, format: .pem)))
        if requireClientCertificate {
            configuration.certificateVerification = .noHostnameVerification
            configuration.trustRoots = .file(certificates.ca.certificatePath)
        }
        return configuration
    }

    func echoOnce(_ url: String, _ tls: TLSOptions) async throws -> String? {
        let reply = NIOLockedValueBox<String?>(nil)
        try await WebSocketTransport.connect(to: url, configuration: WebSocketConfiguration(tls: tls)) { connection in
            try await connection.send(text: "over tls")
            var iterator = connection.inbound.makeAsyncIterator()
            if case .text(let text) = try await iterator.next() { reply.withLockedValue { $0 = text } }
            try await connection.close()
        }
        return reply.withLockedValue { $0 }
    }

    @Test func wssWorksWithTheCustomCA() async throws {
        let server = try await WebSocketEchoServer.start(tls: try serverTLS(certificates.server))
        defer { Task { await server.stop() } }
        let reply = try await echoOnce(server.webSocketBaseURL.replacingLocalhost(), TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath)))
        #expect(reply == "over tls")
        #expect(server.webSocketBaseURL.replacingLocalhost().hasPrefix("wss://"))
    }

    @Test func selfSignedIsRejectedByDefault() async throws {
        let server = try await WebSocketEchoServer.start(tls: try serverTLS(certificates.selfSigned))
        defer { Task { await server.stop() } }
        let error = await #expect(throws: RealtimeError.self) { _ = try await echoOnce(server.webSocketBaseURL.replacingLocalhost(), .default) }
        #expect(error?.code == .tlsFailure)
        // ...and accepted only through the dangerous option.
        let reply = try await echoOnce(server.webSocketBaseURL.replacingLocalhost(), .dangerouslyDisableCertificateVerification())
        #expect(reply == "over tls")
    }

    @Test func wrongHostIsRejectedEvenWithTheRightCA() async throws {
        let server = try await WebSocketEchoServer.start(tls: try serverTLS(certificates.wrongHost))
        defer { Task { await server.stop() } }
        let error = await #expect(throws: RealtimeError.self) {
            _ = try await echoOnce(server.webSocketBaseURL.replacingLocalhost(), TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath)))
        }
        #expect(error?.code == .tlsFailure)
    }

    @Test func pinningAcceptsTheRightKeyAndRejectsAnother() async throws {
        let server = try await WebSocketEchoServer.start(tls: try serverTLS(certificates.server))
        defer { Task { await server.stop() } }
        let rightPin = try TLSPinning.spkiSHA256(of: try NIOSSLCertificate(file: certificates.server.certificatePath, format: .pem))
        let otherPin = try TLSPinning.spkiSHA256(of: try NIOSSLCertificate(file: certificates.otherCA.certificatePath, format: .pem))
        #expect(rightPin != otherPin)
        let ca = TLSOptions.TrustRoots.pemFile(certificates.ca.certificatePath)
        let reply = try await echoOnce(server.webSocketBaseURL.replacingLocalhost(), TLSOptions(trustRoots: ca, pinnedPublicKeySHA256: [otherPin, rightPin]))
        #expect(reply == "over tls")
        let error = await #expect(throws: RealtimeError.self) {
            _ = try await echoOnce(server.webSocketBaseURL.replacingLocalhost(), TLSOptions(trustRoots: ca, pinnedPublicKeySHA256: [otherPin]))
        }
        #expect(error?.code == .certificatePinMismatch)
    }

    @Test func mutualTLSPresentsTheClientCertificate() async throws {
        let server = try await WebSocketEchoServer.start(tls: try serverTLS(certificates.server, requireClientCertificate: true))
        defer { Task { await server.stop() } }
        let ca = TLSOptions.TrustRoots.pemFile(certificates.ca.certificatePath)
        let withCertificate = TLSOptions(
            trustRoots: ca,
            clientCertificate: .files(chain: certificates.client.certificatePath, privateKey: certificates.client.keyPath))
        #expect(try await echoOnce(server.webSocketBaseURL.replacingLocalhost(), withCertificate) == "over tls")
        await #expect(throws: (any Error).self) { _ = try await echoOnce(server.webSocketBaseURL.replacingLocalhost(), TLSOptions(trustRoots: ca)) }
    }

    @Test func httpsUsesTheSameOptions() async throws {
        let server = try await ScriptedHTTPServer.start(tls: try serverTLS(certificates.server))
        defer { Task { await server.stop() } }
        server.route("/hello") { _ in .text("hi") }
        let ok = HTTPRequestSpec(url: server.baseURL + "/hello", tls: TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath)))
        let (head, body) = try await HTTPTransport.execute(ok)
        #expect(head.status == .ok)
        #expect(String(buffer: body) == "hi")
        let error = await #expect(throws: RealtimeError.self) {
            _ = try await HTTPTransport.execute(HTTPRequestSpec(url: server.baseURL + "/hello", headTimeout: .seconds(3)))
        }
        #expect(error?.code == .tlsFailure)
    }
}

extension String {
    /// swift-websocket sends the URL host as SNI, and SNI cannot carry an IP address: TLS tests use
    /// the name `localhost`, which the test certificates also cover.
    func replacingLocalhost() -> String {
        var copy = self
        if let range = copy.range(of: "127.0.0.1") { copy.replaceSubrange(range, with: "localhost") }
        return copy
    }
}
