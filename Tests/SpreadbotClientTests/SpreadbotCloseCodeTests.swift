import Foundation
import RealtimeTesting
import SpreadbotClient
import Testing

/// A server that closes the stream's WebSocket with a code during a session (1008, 1009, 1011) is
/// reported with that code and its reason (`messageTooLarge` for 1009, `webSocketClosed` for the
/// others), in the connection state and the error callback, never as a connection that could not
/// be made. Over a real socket (SpreadbotTestServer's WebSocket).
@Suite(.serialized, .timeLimit(.minutes(2)))
struct SpreadbotCloseCodeTests {
    @Test("a close code during a session", arguments: [
        (UInt16(1008), "policy violation", RealtimeError.Code.webSocketClosed),
        (UInt16(1009), "message too big", RealtimeError.Code.messageTooLarge),
        (UInt16(1011), "internal error", RealtimeError.Code.webSocketClosed),
    ])
    func closeCodeDuringASession(code: UInt16, reason: String, expected: RealtimeError.Code) async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        var configuration = spreadbotConfiguration(server)
        configuration.maxReconnectAttempts = 0
        let client = Spreadbot(configuration: configuration)
        defer { client.closeConnection() }
        let recorder = Recorder(client)
        let ended = Task { () -> RealtimeError? in
            for await state in client.connectionState.updates() {
                if case .disconnected(let error) = state, let error { return error }
            }
            return nil
        }
        client.establishConnection(path: "prices")
        await eventually("connected") { client.state == .connected }
        #expect(client.transport == .webSocket)
        server.publish("before", to: "prices")
        await eventually("the message before the close") { recorder.texts == ["before"] }
        server.closeWebSockets(code: code, reason: reason)
        // With no reconnect attempts the state says it gave up at once, with the session's error
        // as the cause.
        let gaveUp = try #require(await ended.value, "the session ended without an error")
        let error = try #require((gaveUp.code == RealtimeError.Code.reconnectGaveUp ? gaveUp.underlying : gaveUp) as? RealtimeError, "\(gaveUp)")
        #expect(error.closeCode == code, "\(error)")
        #expect(error.code == expected, "\(error)")
        #expect(error.serverMessage == reason, "\(error)")
        #expect(error.code != RealtimeError.Code.connectFailed && !error.description.contains("could not connect"), "\(error)")
        await eventually("the error callback") { recorder.errors.contains { $0.contains("close code \(code)") } }
        #expect(recorder.texts == ["before"])
    }
}
