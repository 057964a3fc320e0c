/// Carries one value that is not `Sendable` (an app's plain closure, Foundation values as an older
/// library's API hands them out, an `NSError`) from the code that made it to the one place that
/// uses it: a serial queue the app chose, or one task. The compat products hand the originals'
/// callbacks and their data this way.
// @unchecked Sendable: the sender gives the value up when it makes the hand-off and never touches
// it again; the receiver uses it on one serial queue or one task at a time, as the original
// libraries did. The app owns its closures' thread-safety, as it did with those libraries.
package struct HandOff<Value>: @unchecked Sendable {
    /// The value handed over.
    package let value: Value

    /// Hands `value` over.
    package init(_ value: Value) { self.value = value }
}
