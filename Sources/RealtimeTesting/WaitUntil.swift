/// A condition another thread or process makes true did not hold in time.
public struct ConditionTimeout: Error, CustomStringConvertible {
    /// The condition that did not become true, and the limit.
    public let description: String
}

/// Waits until `condition` holds, checking it every millisecond, for at most `limit`; throws
/// ``ConditionTimeout`` naming `what` after that. The default limit (30 s) is for a full suite on
/// two busy cores, where a loopback connect has taken over 10 s; a condition that holds returns at once.
///
/// For state with nothing to await: a server's counters, a process's output, a count another
/// thread moves. Where a client reports by a callback, a ``Recorder`` is woken by it instead.
public func waitUntil(
    _ what: @autoclosure () -> String = "the condition", limit: Duration = .seconds(30), _ condition: () -> Bool
) async throws {
    let deadline = ContinuousClock.now + limit
    while !condition() {
        guard ContinuousClock.now < deadline else { throw ConditionTimeout(description: "\(what()) did not hold within \(limit)") }
        try await Task.sleep(for: .milliseconds(1))
    }
}
