import Foundation
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing

/// A server that ends a session with a WebSocket close code, while invocations are in flight, is
/// reported with that code and its reason: as `messageTooLarge` for 1009, as `webSocketClosed`
/// for the others, never as a connection that could not be made. Over a real socket
/// (SignalRTestServer's WebSocket), ten times per code.
///
/// A server that closes its socket right after its close frame while the client is still sending
/// resets the TCP connection. When the reset reaches the client's event loop together with the
/// close frame, SwiftNIO handles the reset first and the close frame is never read: the client can
/// only report `connectionClosed` with 1006. The second test measures that and checks that it is
/// still never a connect failure.
@Suite("SignalR: a close code during a session is reported with that code", .serialized, .timeLimit(.minutes(3)))
struct CloseCodeTests {
    static let codes: [(code: UInt16, reason: String, expected: RealtimeError.Code)] = [
        (1008, "policy violation", .webSocketClosed),
        (1009, "message too big", .messageTooLarge),
        (1011, "internal error", .webSocketClosed),
    ]

    @Test("close code during a burst of invocations, the server lingering for the client's close frame", arguments: [0, 1, 2])
    func closeCodeDuringABurst(_ index: Int) async throws {
        let (code, reason, expected) = Self.codes[index]
        for round in 1...10 {
            let error = try await closeDuringBurst(code: code, reason: reason, lingering: true, round: round)
            #expect(error.closeCode == code, "round \(round): \(error)")
            #expect(error.code == expected, "round \(round): \(error)")
            #expect(error.serverMessage == reason, "round \(round): \(error)")
        }
    }

    @Test("close code during a burst, the server closing its socket at once: the code, or 1006 after a reset, never a connect failure", arguments: [0, 1, 2])
    func closeCodeThenImmediateSocketClose(_ index: Int) async throws {
        let (code, reason, expected) = Self.codes[index]
        var lost = 0
        for round in 1...10 {
            let error = try await closeDuringBurst(code: code, reason: reason, lingering: false, round: round)
            if error.closeCode == 1006 {
                #expect(error.code == .connectionClosed, "round \(round): \(error)")
                lost += 1
            } else {
                #expect(error.closeCode == code && error.code == expected && error.serverMessage == reason, "round \(round): \(error)")
            }
        }
        print("close code \(code), server closing at once: \(lost) of 10 close frames lost to the reset")
    }

    /// Opens a connection, starts 200 invocations, has the server close with `code` once 20 reached
    /// it, and returns the error the connection closed with.
    private func closeDuringBurst(code: UInt16, reason: String, lingering: Bool, round: Int) async throws -> RealtimeError {
        let server = try await SignalRTestServer.start()
        server.method("echo", concurrent: true) { call in call.arguments.first ?? .null }
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets).build()
        let closed = Recorder<RealtimeError?>()
        connection.onClosed { error in closed.append(error as? RealtimeError) }
        try await connection.start()
        let outcomes = Recorder<String>()
        let burst = Task {
            await withTaskGroup(of: Void.self) { group in
                for value in 0..<200 {
                    group.addTask {
                        do {
                            let _: Int = try await connection.invoke(method: "echo", arguments: value)
                            outcomes.append("completed")
                        } catch let error as RealtimeError {
                            outcomes.append("\(error.code)")
                        } catch { outcomes.append("\(error)") }
                    }
                }
            }
        }
        try await waitUntil("invocations reached the server", limit: .seconds(20)) {
            server.receivedTargets.filter { $0 == "echo" }.count >= 20
        }
        await server.closeWebSockets(code: code, reason: reason, lingering: lingering)
        let error = try #require(try await closed.wait(count: 1).first ?? nil, "round \(round): closed without an error")
        #expect(error.code != .connectFailed && !error.description.contains("could not connect"), "round \(round): \(error)")
        _ = await burst.value
        let all = try await outcomes.wait(count: 200)
        // Each invocation completed before the close, failed because the connection closed, or (a
        // task the loaded machine started only after the close) was refused as notConnected and
        // never sent: the server received no more than the first two kinds.
        #expect(all.allSatisfy { $0 == "completed" || $0 == "connectionClosed" || $0 == "notConnected" }, "round \(round): \(Set(all))")
        let sent = all.count { $0 != "notConnected" }
        #expect(server.receivedTargets.filter { $0 == "echo" }.count <= sent, "round \(round): the server got an invocation reported notConnected")
        await server.stop()
        return error
    }
}
