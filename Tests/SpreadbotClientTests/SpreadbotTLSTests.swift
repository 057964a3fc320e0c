import Foundation
import NIOSSL
import RealtimeTesting
import SpreadbotClient
import Testing

/// HTTPS and WSS with certificates made by `openssl` for the test: the stream, sends and REST over
/// TLS with the test CA trusted, and a typed `tlsFailure` (no retry loop) without it.
@Suite(.timeLimit(.minutes(2)))
final class SpreadbotTLSTests {
    let certificates: TestCertificates

    init() async throws {
        certificates = try await TestCertificates.make()
    }

    deinit { certificates.remove() }

    func start() async throws -> SpreadbotTestServer {
        var options = SpreadbotTestServer.Options()
        options.tls = try certificates.server.serverConfiguration()
        return try await SpreadbotTestServer.start(options: options)
    }

    @Test(arguments: [SpreadbotTransport.webSocket, .serverSentEvents])
    func streamAndRESTOverTLS(transport: SpreadbotTransport) async throws {
        let server = try await start()
        defer { Task { await server.stop() } }
        var configuration = spreadbotConfiguration(server)
        configuration.transports = [transport]
        configuration.tls = TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath))
        let client = Spreadbot(configuration: configuration)
        let recorder = Recorder(client)
        client.establishConnection(path: "secure")
        await eventually("connected over TLS") { client.state == .connected }
        #expect(server.baseURL.hasPrefix("https://"))
        server.publish("sealed", to: "secure")
        try await client.send("signed")
        await eventually("both ways") { recorder.texts == ["sealed"] && server.received(on: "secure") == [.text("signed")] }
        server.setResource("/me", json: #"{"tls":true}"#)
        #expect(try await client.rest.getData(path: "me").json()["tls"] == true)
        client.closeConnection()
    }

    @Test func untrustedCertificateIsATypedErrorWithoutRetries() async throws {
        let server = try await start()
        defer { Task { await server.stop() } }
        let client = Spreadbot(configuration: spreadbotConfiguration(server))  // system trust roots only
        let recorder = Recorder(client)
        client.establishConnection(path: "secure")
        await client.waitUntilClosed()
        #expect(client.state == .disconnected)
        #expect(client.lastError?.code == .tlsFailure)
        // One failure per transport, then the stream stops: a certificate problem is not retried.
        #expect(recorder.errors.count == 3, "\(recorder.errors)")
        #expect(recorder.errors.allSatisfy { $0.hasPrefix("RealtimeError.tlsFailure") }, "\(recorder.errors)")
        let error = await #expect(throws: RealtimeError.self) { try await client.rest.getData(path: "x") }
        #expect(error?.code == .tlsFailure)
    }
}
