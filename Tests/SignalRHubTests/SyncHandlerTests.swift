import Foundation
import NIOConcurrencyHelpers
import RealtimeCore
import RealtimeTesting
@testable import SignalRHub
import Testing

/// Handlers that do not await (closures with no `await`) run in the same order as those that do,
/// on every transport; one whose arguments do not bind is skipped and the others still run; one
/// that returns a value answers a client result, and one that throws sends the error back.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct SyncHandlerTests {
    @Test("handlers with and without await run one at a time in arrival order", arguments: [HttpTransportType.webSockets, .serverSentEvents, .longPolling])
    func mixedHandlersKeepTheOrder(_ transport: HttpTransportType) async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        server.method("burst", concurrent: true) { [weak server] call in
            for value in 0..<(call.arguments[0].intValue ?? 0) {
                try await server?.invokeClientSend(call.connectionId, value % 3 == 0 ? "awaits" : "atOnce", [.number(Double(value))])
            }
            return nil
        }
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: transport).build()
        let seen = Recorder<String>()
        let running = NIOLockedValueBox(0)
        connection.on("atOnce") { (value: Int) in
            // Counted: no other handler may be running meanwhile.
            let others = running.withLockedValue { count in defer { count += 1 }; return count }
            seen.append(others == 0 ? "\(value)" : "overlap at \(value)")
            running.withLockedValue { $0 -= 1 }
        }
        connection.on("awaits") { (value: Int) async in
            let others = running.withLockedValue { count in defer { count += 1 }; return count }
            await Task.yield()
            seen.append(others == 0 ? "\(value)" : "overlap at \(value)")
            running.withLockedValue { $0 -= 1 }
        }
        // Arguments that do not bind (a string for an Int): logged and skipped; the others run.
        connection.on("atOnce") { (_: String) in seen.append("bound a string") }
        try await connection.start()
        try await connection.send(method: "burst", arguments: 300)
        let values = await seen.wait(for: 300)
        #expect(values == (0..<300).map { "\($0)" })
        await connection.stop()
    }

    /// A read's invocations reach the handlers together; a Close in the same frame after them
    /// ends the connection only once they were handed over.
    @Test("invocations read with a Close run before the connection closes")
    func invocationsBeforeACloseInOneRead() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets).build()
        let seen = Recorder<String>()
        connection.on("atOnce") { (value: Int) in seen.append("\(value)") }
        connection.on("awaits") { (value: Int) async in seen.append("\(value) awaited") }
        connection.onClosed { error in seen.append("closed \((error as? RealtimeError)?.serverMessage ?? "nil")") }
        try await connection.start()
        let frame = #"{"type":1,"target":"atOnce","arguments":[1]}"# + "\u{1e}" + #"{"type":1,"target":"awaits","arguments":[2]}"# + "\u{1e}"
            + #"{"type":1,"target":"atOnce","arguments":[3]}"# + "\u{1e}" + #"{"type":7,"error":"bye"}"# + "\u{1e}"
        await server.sendRaw(Array(frame.utf8), binary: false)
        let values = await seen.wait(for: 4)
        #expect(Array(values.prefix(3)) == ["1", "2 awaited", "3"])
        #expect(values.last == "closed bye")
    }

    @Test("a client result from a handler that does not await, and its thrown error")
    func clientResultsWithoutAwait() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets).build()
        connection.on("getValue") { (prefix: String) in prefix + " at once" }
        connection.on("refuse") { (_: Int) throws -> String in throw SignalRTestServerError(message: "refused at once") }
        try await connection.start()
        let answer: String = try await connection.invoke(method: "askClient", arguments: "getValue", "value")
        #expect(answer == "value at once")
        let failed = await #expect(throws: HubInvocationError.self) { try await connection.invoke(method: "askClient", arguments: "refuse", 1) }
        #expect(failed?.message.contains("refused at once") == true)
        await connection.stop()
    }
}
