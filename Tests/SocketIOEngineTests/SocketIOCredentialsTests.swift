import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RealtimeCore
import RealtimeTesting
import SocketIOEngine
import Testing

/// `EngineIOOptions.headersProvider`: headers made anew for every connection attempt, against a
/// server that accepts only the newest token, over polling (with the upgrade) and WebSocket.
@Suite(.serialized, .timeLimit(.minutes(2))) struct SocketIOCredentialsTests {
    @Test("each attempt carries the provider's newest token", arguments: [[EngineIOOptions.Transport.polling, .websocket], [.websocket]])
    func rotatingToken(_ transports: [EngineIOOptions.Transport]) async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        server.requireAuthorization("Bearer t1")
        let issued = NIOLockedValueBox(0)
        var configuration = SocketIOConfiguration.testing(transports)
        configuration.engine.headers = ["Authorization": "Bearer static", "X-Client": "kept"]
        configuration.engine.headersProvider = {
            let number = issued.withLockedValue { $0 += 1; return $0 }
            return ["Authorization": "Bearer t\(number)"]
        }
        let manager = SocketManager(url: server.url, configuration: configuration)
        defer { manager.disconnect() }
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(30))
        #expect(try await socket.emitWithAck("echo", arguments: ["first"], timeout: .seconds(30)) == ["first"])
        if transports.count == 2 { try await waitUntil("the upgrade") { manager.transport == .websocket } }

        // The server rotates its credentials and drops everyone: the reconnect must ask again.
        server.requireAuthorization("Bearer t2")
        server.dropAllConnections()
        try await waitUntil("the reconnect with the new token") { server.connectCount >= 2 && socket.status == .connected }
        #expect(try await socket.emitWithAck("echo", arguments: ["second"], timeout: .seconds(30)) == ["second"])
        let seen = server.authorizations
        #expect(seen.first == "Bearer t1")
        #expect(seen.last == "Bearer t2")
        #expect(Set(seen) == ["Bearer t1", "Bearer t2"], "a session's handshake and upgrade carry its attempt's token: \(seen)")
        #expect(issued.withLockedValue { $0 } == 2)
    }

    @Test("a provider that throws fails the attempt as authenticationFailed")
    func throwingProvider() async throws {
        let server = try await SocketIOTestServer.start()
        defer { Task { await server.stop() } }
        struct Down: Error {}
        var configuration = SocketIOConfiguration.testing([.websocket])
        configuration.reconnectionAttempts = 0
        configuration.engine.headersProvider = { throw Down() }
        let manager = SocketManager(url: server.url, configuration: configuration)
        defer { manager.disconnect() }
        let error = await #expect(throws: RealtimeError.self) { try await manager.defaultSocket.connect(timeout: .seconds(30)) }
        let cause = error?.code == .reconnectGaveUp ? error?.underlying as? RealtimeError : error
        #expect(cause?.code == .authenticationFailed, "\(String(describing: error))")
        #expect(server.authorizations.isEmpty, "nothing was sent")
    }
}
