import RealtimeTesting
@testable import SignalRHub
import Testing

/// Client method names match without regard to case, as in the official clients (the .NET client
/// keys its handlers case-insensitively; the TypeScript client lowercases both sides): a handler
/// for "ReceiveMessage" gets the server's "receivemessage" and "RECEIVEMESSAGE".
@Suite(.timeLimit(.minutes(1)))
struct HandlerNameCaseTests {
    @Test func keys() {
        #expect(HubConnection.handlerKey("tick") == "tick")
        #expect(HubConnection.handlerKey("ReceiveMessage") == "receivemessage")
        #expect(HubConnection.handlerKey("RECEIVEMESSAGE") == "receivemessage")
        // Beyond ASCII the name is folded as `lowercased()` folds it.
        #expect(HubConnection.handlerKey("ÄrgerMelden") == "ärgermelden")
        #expect(HubConnection.handlerKey("ärger") == "ärger")
    }

    @Test func anInvocationReachesTheHandlerWhateverTheCaseOfItsTarget() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        server.method("Echo") { [weak server] call in
            for target in ["receivemessage", "RECEIVEMESSAGE", "ReceiveMessage"] {
                await server?.broadcast(target, call.arguments)
            }
            return nil
        }
        let connection = HubConnectionBuilder().withUrl(url: server.url).build()
        let received = Recorder<String>()
        connection.on("ReceiveMessage") { (text: String) in received.append(text) }
        try await connection.start()
        try await connection.invoke(method: "Echo", arguments: "hello")
        #expect(await received.wait(for: 3) == ["hello", "hello", "hello"])
        await connection.stop()
    }
}
