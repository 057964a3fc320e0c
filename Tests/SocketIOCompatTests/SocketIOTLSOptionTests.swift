import Foundation
import RealtimeCore
import RealtimeTesting
import SocketIO
import Testing

// TLS through the compat's options, against our Socket.IO server over real TLS (certificates made
// by openssl for this run): `.tls(TLSOptions(...))` sets the trust roots; `.selfSigned(true)` has
// no effect, as in socket.io-client-swift 16 (which stored it and never read it), so a server's
// self-signed certificate is still refused.
@Suite(.serialized, .timeLimit(.minutes(2)))
final class SocketIOTLSOptionTests {
    let certificates: TestCertificates

    init() async throws {
        certificates = try await TestCertificates.make()
    }

    deinit { certificates.remove() }

    func server(_ pair: TestCertificates.Pair) async throws -> SocketIOTestServer {
        var options = SocketIOTestServer.Options()
        options.tls = try pair.serverConfiguration()
        return try await SocketIOTestServer.start(options: options)
    }

    @Test(".tls(TLSOptions(trustRoots:)) connects to a server whose CA it names")
    func tlsOptionSetsTrustRoots() async throws {
        let server = try await server(certificates.server)
        let queue = DispatchQueue(label: "socketio-tls-option")
        let manager = SocketManager(socketURL: URL(string: server.url)!, config: [
            .handleQueue(queue), .reconnects(false),
            .tls(TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath))),
        ])
        let socket = manager.defaultSocket
        let connected = Recorder<String>()
        socket.on(clientEvent: .connect) { _, _ in connected.append("connect") }
        socket.connect()
        #expect(await connected.wait(for: 1, limit: .seconds(30)) == ["connect"])
        #expect(server.url.hasPrefix("https://"))
        manager.disconnect()
        await server.stop()
    }

    @Test(".selfSigned(true) has no effect: a self-signed server certificate is refused, reported as an error event")
    func selfSignedDoesNotTurnOffVerification() async throws {
        let server = try await server(certificates.selfSigned)
        let queue = DispatchQueue(label: "socketio-self-signed")
        let manager = SocketManager(socketURL: URL(string: server.url)!, config: [
            .handleQueue(queue), .reconnects(false), .selfSigned(true), .forceWebsockets(true),
        ])
        let socket = manager.defaultSocket
        let events = Recorder<String>()
        socket.on(clientEvent: .connect) { _, _ in events.append("connect") }
        socket.on(clientEvent: .error) { data, _ in events.append("error \(data)") }
        socket.connect()
        let seen = await events.wait(for: 1, limit: .seconds(30))
        #expect(seen.first?.hasPrefix("error ") == true, "\(seen)")
        #expect(seen.first?.localizedCaseInsensitiveContains("tls") == true, "\(seen)")
        #expect(!events.values.contains("connect"))
        manager.disconnect()
        await server.stop()
    }
}
