import Foundation
import NIOConcurrencyHelpers
import RealtimeCore
import RealtimeTesting
import SocketIOEngine

func peerScript(_ name: String) -> String {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Peers/\(name)").path
}

/// Collects what handlers see, and lets a test wait for it.
final class Recorder<Value: Sendable>: Sendable {
    private let state = NIOLockedValueBox<(values: [Value], waiters: [(Int, CheckedContinuation<Void, Never>)])>(([], []))

    func append(_ value: Value) {
        let ready = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            state.values.append(value)
            let count = state.values.count
            let ready = state.waiters.filter { $0.0 <= count }.map(\.1)
            state.waiters.removeAll { $0.0 <= count }
            return ready
        }
        for waiter in ready { waiter.resume() }
    }

    var values: [Value] { state.withLockedValue { $0.values } }

    /// Waits until at least `count` values arrived, or `limit` passed (then returns what is there).
    @discardableResult
    func wait(for count: Int, limit: Duration = .seconds(10)) async -> [Value] {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let ready = self.state.withLockedValue { state -> Bool in
                        if state.values.count >= count { return true }
                        state.waiters.append((count, continuation))
                        return false
                    }
                    if ready { continuation.resume() }
                }
            }
            group.addTask { try? await Task.sleep(for: limit) }
            await group.next()
            group.cancelAll()
            // Release a waiter left behind by the timeout.
            let stale = self.state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
                defer { state.waiters = [] }
                return state.waiters.map(\.1)
            }
            for waiter in stale { waiter.resume() }
        }
        return values
    }
}

extension SocketIOConfiguration {
    /// Fast reconnects, no reachability probing: for loopback tests.
    static func testing(_ transports: [EngineIOOptions.Transport] = [.polling, .websocket], upgrade: Bool = true) -> SocketIOConfiguration {
        var configuration = SocketIOConfiguration()
        configuration.engine.transports = transports
        configuration.engine.upgrade = upgrade
        configuration.engine.connectTimeout = .seconds(5)
        configuration.reconnectionDelay = .milliseconds(50)
        configuration.reconnectionDelayMax = .milliseconds(200)
        configuration.reachability = AlwaysReachable()
        return configuration
    }
}
