import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RealtimeTesting
import Testing

/// `LoopbackServer.stop()` with idle connections open and connections still arriving. Two defects
/// of the earlier stop (cancelling Hummingbird's serving task): it hung for as long as a client kept
/// an idle connection open (Hummingbird waits for the WebSocket upgrade on a future that
/// cancellation does not reach), and connections accepted but not yet handed over were dropped with
/// their `NIOAsyncChannel` unfinished, which traps the process ("Deinited NIOAsyncWriter without
/// calling finish()", swift-nio issues 2637 and 3481; it crashed a full test run). A regression of
/// the second crashes the test run rather than failing one test.
@Suite("LoopbackServer: stop with idle and arriving connections", .serialized, .timeLimit(.minutes(5)))
struct LoopbackServerStopTests {
    @Test("32 idle connections open, 32 more arriving, then stop, 20 times: stop returns and closes every idle connection")
    func stopWithIdleAndArrivingConnections() async throws {
        let group = MultiThreadedEventLoopGroup.singleton
        for round in 0..<20 {
            let server = try await WebSocketEchoServer.start()
            var connected: [any Channel] = []  // idle: connected before stop()
            for _ in 0..<32 {
                connected.append(try await ClientBootstrap(group: group).connect(host: "127.0.0.1", port: server.port).get())
            }
            let arriving = (0..<32).map { _ in ClientBootstrap(group: group).connect(host: "127.0.0.1", port: server.port) }
            // stop() must return although no client closes: bounded here so a hang fails the test.
            let returned = NIOLockedValueBox(false)
            let stopping = Task {
                await server.stop()
                returned.withLockedValue { $0 = true }
            }
            // Sampled, not awaited: a stop() that hangs must fail the round and still let it clean up.
            let deadline = ContinuousClock.now + .seconds(15)
            while !returned.withLockedValue({ $0 }), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(returned.withLockedValue { $0 }, "round \(round): stop() did not return within 15 s")
            // The idle connections were accepted by this server: it must close every one. (An
            // arriving connection may have reached another test's server that took the freed port,
            // so only the process surviving them is checked.)
            let idle = connected
            // Sampled for the same reason: the connections are closed below whatever happens.
            let closedBy = ContinuousClock.now + .seconds(10)
            var open = idle.filter(\.isActive).count
            while open > 0, ContinuousClock.now < closedBy {
                try await Task.sleep(for: .milliseconds(10))  // sampled (see above)
                open = idle.filter(\.isActive).count
            }
            for channel in idle { try? await channel.close() }
            for connect in arriving {
                if let channel = try? await connect.get() { try? await channel.close() }
            }
            #expect(open == 0, "round \(round): \(open) of \(idle.count) idle connections still open 10 s after stop()")
            if !returned.withLockedValue({ $0 }) || open > 0 {
                stopping.cancel()
                break
            }
            await stopping.value
        }
    }
}
