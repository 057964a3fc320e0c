import Foundation
import NIOSSL
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// Socket.IO over real TLS on loopback (HTTPS polling, then WSS), with certificates made by
/// `openssl` for this run.
@Suite(.serialized, .timeLimit(.minutes(2)))
final class SocketIOTLSTests {
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

    @Test("https polling upgrades to wss; acks with binary work over TLS with the custom CA")
    func pollingUpgradeOverTLS() async throws {
        let server = try await server(certificates.server)
        var configuration = SocketIOConfiguration.testing()
        configuration.engine.tls = TLSOptions(trustRoots: .pemFile(certificates.ca.certificatePath))
        let manager = SocketManager(url: server.url, configuration: configuration)
        let socket = manager.defaultSocket
        let upgrades = Recorder<Int>()
        socket.on(clientEvent: .websocketUpgrade) { _ in upgrades.append(1) }
        try await socket.connect(timeout: .seconds(30))
        let blob = Data((0..<4096).map { UInt8($0 % 256) })
        #expect(try await socket.emitWithAck("echo", arguments: ["tls", .binary(blob)], timeout: .seconds(30)) == ["tls", .binary(blob)])
        await upgrades.wait(for: 1)
        #expect(manager.transport == .websocket)
        #expect(try await socket.emitWithAck("echo", arguments: [.binary(blob)], timeout: .seconds(30)) == [.binary(blob)])
        #expect(server.url.hasPrefix("https://"))
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }

    @Test("a self-signed server certificate is refused with a typed TLS error and nothing is sent")
    func selfSignedIsRefused() async throws {
        let server = try await server(certificates.selfSigned)
        let manager = SocketManager(url: server.url, configuration: .testing([.websocket]))
        let socket = manager.defaultSocket
        let errors = Recorder<[JSONValue]>()
        socket.on(clientEvent: .error) { errors.append($0.arguments) }
        // A refused certificate ends the connect at once (the manager stops: TLS failures are not
        // retried), long before this limit. With 2 s, a repeat run beside two CPU-burning loops saw
        // the limit pass before the handshake had failed.
        let error = await #expect(throws: RealtimeError.self) { try await socket.connect(timeout: .seconds(30)) }
        #expect(error?.code == .tlsFailure, "connect(timeout:) reports the attempt's TLS failure, not a bare timeout")
        let reported = await errors.wait(for: 1)
        #expect(reported.contains { "\($0)".contains("RealtimeError.tlsFailure") }, "\(reported)")
        #expect(server.receivedEvents.isEmpty)
        manager.disconnect()
        await manager.waitUntilStopped()
        await server.stop()
    }
}
